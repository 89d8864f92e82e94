"""Validation of option values, shared by every sub-command: a bad value is a usage error (one line, exit 2)
that names the option and the values it takes, never a silently ignored gate."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer

from tito_audit.errors import EXIT_OPERATIONAL
from tito_audit.formats import OUTPUT_FORMATS

FORMAT_NAMES = tuple(e.name for e in OUTPUT_FORMATS.ordered())  # each format module registers itself (light ones)

# The largest values numeric options take (``number``): beyond them a value means nothing a run can do (a pool of
# a million processes, a deadline of years, an address space past what the kernel accepts) and would crash, hang
# or silently pass instead.
MAX_WORKERS = 1024
MAX_SECONDS = 86_400.0  # CPU seconds: a day
MAX_MEMORY_MB = 16 << 20  # 16 TiB, in MiB
MAX_RECORD_MB = 1 << 20  # 1 TiB, in MiB
MAX_COUNT = 1_000_000_000  # templates, episodes, scenarios


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


def _shown(x: float) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:,g}"


def number(
    low: float,
    high: float,
    *,
    above: bool = False,
    note: str = "",
) -> Callable[[Any], Any]:
    """A typer callback for a numeric option: a finite number from ``low`` (excluded with ``above``) to ``high``,
    else a usage error that names the option and its range (one line, exit 2). NaN, infinities and values past
    what the option can mean (an address space of exabytes, a deadline of centuries) are refused here, not turned
    into a crash, a hang or a silent pass later. ``note`` says what a special value means (``0: ...``)."""
    lower = f"more than {_shown(low)}" if above else f"from {_shown(low)}"
    span = f"{lower} and at most {_shown(high)}" if above else f"{lower} to {_shown(high)}"

    def check(value: Any) -> Any:
        if value is None:
            return value
        bad = isinstance(value, float) and not math.isfinite(value)
        bad = bad or value > high or value < low or (above and value == low)
        if bad:
            raise typer.BadParameter(f"{value} is out of range: give a number {span}{note}")
        return value

    return check


def folder_problem(spec: str | None, option: str) -> str | None:
    """Why a ``--weights``/``--ref`` that names a local folder cannot be loaded (None: it can, or it is a Hub id).
    A spec that reads as a path (``/``, ``.``, ``~`` first, or more than one ``/``: a Hub id has one) and is not a
    folder is named as such, never handed to the Hub, whose answer ("Repo id must be in the form...") misleads."""
    if spec is None:
        return None
    path = Path(spec).expanduser()
    looks_local = spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or path.exists()
    if not looks_local or path.is_dir():
        return None
    what = "is a file, not a folder" if path.exists() else "no such folder"
    return f"{spec}: cannot load weights: {what} ({option})"


def fail(message: str) -> NoReturn:
    """A usage or operational error before or instead of the work: one ``error:`` line, exit 2."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_OPERATIONAL)


def contradiction(first: str, second: str, why: str) -> NoReturn:
    """Two options given together that cannot both hold: one line, exit 2 (as ``--verbose --quiet``)."""
    fail(f"{first} and {second} contradict each other: {why}")
