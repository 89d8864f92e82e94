"""Options that several commands declare, defined once so that their flags, defaults and help stay the same.

Each is a function returning a fresh typer parameter: a parameter object (and a list default) is never shared
between two commands.
"""

from __future__ import annotations

from typing import Any

import typer

from tito_audit.cli.params import check_kwargs


def models_argument() -> Any:
    """``MODEL...`` of ``audit`` and ``table``."""
    return typer.Argument(None, help=r"Hub repo ids (org/name\[@revision]), local folders or bundled names.")


def offline_option() -> Any:
    return typer.Option(False, "--offline", help="Never touch the network (like HF_HUB_OFFLINE=1).")


def template_name_option() -> Any:
    return typer.Option(None, "--template-name", help="Named template, e.g. tool_use.")


def template_kwarg_option() -> Any:
    return typer.Option([], "--template-kwarg", "-k", help="KEY=VALUE passed to the template.", callback=check_kwargs)


def debug_option() -> Any:
    return typer.Option(False, "--debug", help="Show tracebacks.")
