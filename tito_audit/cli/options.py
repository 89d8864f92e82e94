"""Options that several commands declare, defined once so that their flags, defaults and help stay the same.

Each is a function returning a fresh typer parameter: a parameter object (and a list default) is never shared
between two commands.
"""

from __future__ import annotations

from typing import Any

import typer

from tito_audit.cli.params import check_kwargs, one_of


def models_argument() -> Any:
    """``MODEL...`` of ``audit`` and ``table``."""
    return typer.Argument(None, help=r"Hub repo ids (org/name\[@revision]), local folders or bundled names.")


def offline_option() -> Any:
    return typer.Option(False, "--offline", help="Never touch the network (like HF_HUB_OFFLINE=1).")


def template_name_option() -> Any:
    return typer.Option(None, "--template-name", help="Named template, e.g. tool_use.")


def template_kwarg_option() -> Any:
    return typer.Option([], "--template-kwarg", "-k", help="KEY=VALUE passed to the template.", callback=check_kwargs)


def _thinking_values() -> tuple[str, ...]:
    from tito_audit.audit.context import THINKING  # asked when the option is parsed, not for --help

    return THINKING


def thinking_option() -> Any:
    """``--thinking`` of ``audit`` and ``rl``: the reasoning modes played (``AuditOptions.thinking``)."""
    return typer.Option(
        "both",
        "--thinking",
        help="Reasoning modes to play: both (the template's default mode, then each reasoning switch such as "
        "enable_thinking on and off) | on | off (each switch so) | unset (the default mode only, no switch).",
        callback=one_of(_thinking_values),
    )


def debug_option() -> Any:
    return typer.Option(False, "--debug", help="Show tracebacks.")


def search_option(default: str = "40") -> Any:
    """``--search N`` of ``audit``, ``scan``, ``fix`` and ``rl``: conversations the counterexample search draws
    (``AuditOptions.search``; None: the command's default)."""
    return typer.Option(
        None,
        "--search",
        min=0,
        help=f"Conversations the counterexample search draws per template (default {default}; 0: off, said in the "
        "report).",
    )


def search_seed_option() -> Any:
    return typer.Option(0, "--search-seed", help="Seed of the counterexample search (the same seed, the same answer).")
