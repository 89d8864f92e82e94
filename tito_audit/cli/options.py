"""Options that several commands declare, defined once so that their flags, defaults and help stay the same.

Each is a function returning a fresh typer parameter: a parameter object (and a list default) is never shared
between two commands.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from tito_audit.cli.params import MAX_COUNT, check_kwargs, number, one_of

Options = TypeVar("Options")


def command(options: type[Options], run: Callable[[Options, frozenset[str]], None]) -> Callable[..., None]:
    """A typer command whose parameters are the fields of the dataclass ``options`` (each annotated, or defaulted,
    with its ``typer.Argument``/``typer.Option``, in help order): typer reads the signature given here, and ``run``
    gets one ``options`` object instead of a signature of thirty parameters, and the names of the parameters given
    on the command line (a contradiction is an option given, not a default). Help and docstring are ``run``'s."""
    hints = typing.get_type_hints(options, include_extras=True)
    parameters = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            annotation=hints[f.name],
        )
        for f in dataclasses.fields(options)  # type: ignore[arg-type]
    ]
    context = inspect.Parameter("_typer_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)

    def typer_command(_typer_context: typer.Context, **values: Any) -> None:
        run(options(**values), given(_typer_context, values))

    typer_command.__signature__ = inspect.Signature([*parameters, context])  # type: ignore[attr-defined]
    typer_command.__doc__ = run.__doc__
    typer_command.__name__ = typer_command.__qualname__ = run.__name__
    typer_command.__module__ = run.__module__
    return typer_command


def given(ctx: typer.Context, values: dict[str, Any]) -> frozenset[str]:
    """The parameters given on the command line (or from the environment), not left at their default."""
    out = set()
    for name in values:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            out.add(name)
    return frozenset(out)


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
        help=f"Conversations the counterexample search draws per template (default {default}; 0: off, said in the "
        "report).",
        callback=number(0, MAX_COUNT),
    )


def search_seed_option() -> Any:
    return typer.Option(0, "--search-seed", help="Seed of the counterexample search (the same seed, the same answer).")
