"""Where a command's text goes: a file with ``--output``, else stdout (stderr carries errors and progress)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from tito_audit.audit import ModelReport


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
