"""Where a command's text goes: a file with ``--output``, else stdout (stderr carries errors and progress)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from tito_audit.audit import ModelReport

# Columns of a console that is not a terminal (a pipe, a CI log): wide enough that no line tito-audit prints wraps.
# rich's own default there is 80, which broke template names and check summaries mid-word in CI logs.
PIPE_WIDTH = 10_000


def emit(text: str, output: Path | None) -> None:
    """The text on stdout, or in ``output`` with one ``wrote FILE`` line on stderr (as ``fix`` says it)."""
    if output is None:
        sys.stdout.write(text)
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text, encoding="utf-8")
    typer.echo(f"wrote {output}", err=True)


def echo_model_errors(models: Iterable[ModelReport], debug: bool = False) -> None:
    """One line per model that could not be audited; its traceback only with ``--debug``."""
    for m in models:
        if m.error:
            typer.echo(f"error: {m.error}", err=True)
            if debug and m.traceback:
                typer.echo(m.traceback, err=True)


def output_console(stderr: bool = False) -> Console:
    """rich's console on a terminal; elsewhere one that does not wrap (``PIPE_WIDTH``). ``COLUMNS``, when set, is
    the width either way (rich reads it)."""
    from rich.console import Console

    made = Console(stderr=stderr)
    if made.is_terminal or os.environ.get("COLUMNS", "").strip():
        return made
    return Console(stderr=stderr, width=PIPE_WIDTH)
