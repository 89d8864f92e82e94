"""Validation of option values, shared by every sub-command: a bad value is a usage error (one line, exit 2)
that names the option and the values it takes, never a silently ignored gate."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import typer

from tito_audit.formats import OUTPUT_FORMATS

FORMAT_NAMES = tuple(e.name for e in OUTPUT_FORMATS.ordered())  # each format module registers itself (light ones)


def one_of(allowed: Sequence[str] | Callable[[], Iterable[str]]) -> Callable[[Any], Any]:
    """A typer callback accepting exactly the listed values (a callable is asked lazily, at parse time)."""

    def check(value: Any) -> Any:
        if value is None:
            return value
        names = tuple(allowed() if callable(allowed) else allowed)
        if value not in names:
            raise typer.BadParameter(f"{value!r} is not one of {', '.join(names)}")
        return value

    return check


def many_of(allowed: Callable[[], Iterable[str]], empty_ok: bool = True) -> Callable[[Any], Any]:
    """A comma-separated list of values, each one of ``allowed`` (``''`` is the empty list when ``empty_ok``)."""

    def check(value: Any) -> Any:
        if value is None:
            return value
        names = tuple(allowed())
        given = [v.strip() for v in str(value).split(",") if v.strip()]
        bad = [v for v in given if v not in names]
        if bad or (not given and not empty_ok):
            shown = ", ".join(repr(b) for b in bad) or repr(value)
            raise typer.BadParameter(f"{shown} is not one of {', '.join(names)}")
        return value

    return check


def parse_date(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)") from None


def check_date(value: Any) -> Any:
    if value is not None:
        parse_date(value)
    return value


def parse_kwargs(pairs: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; values are JSON when they parse (true, 3, "x"), else strings. A switch named
    ``enable_*`` (``enable_thinking``) must be true or false: a template tests it for truth, so ``maybe`` would
    silently mean on."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
        if key.startswith("enable_") and not isinstance(out[key], bool):
            raise typer.BadParameter(f"{pair!r}: {key} is a switch, true or false")
    return out


def check_kwargs(value: Any) -> Any:
    if value:
        parse_kwargs(value)
    return value
