"""Where a command's text goes: a file with ``--output``, else stdout (stderr carries errors and progress).

A file is checked before any work (``check_output``: a directory, a missing directory, a read-only or impossible
path is one line and exit 2, never a traceback after a whole audit; no directory is created), and written
atomically (``write_atomically``: a temporary file beside it, then a rename), so that an interrupted or failed
write never leaves half a report where the last one was.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from tito_audit.errors import EXIT_OPERATIONAL

if TYPE_CHECKING:
    from rich.console import Console

    from tito_audit.report.model_report import ModelReport

# Columns of a console that is not a terminal (a pipe, a CI log): wide enough that no line tito-audit prints wraps.
# rich's own default there is 80, which broke template names and check summaries mid-word in CI logs.
PIPE_WIDTH = 10_000

# The format a report file's suffix names (``--output report.html`` without ``--format``); any other suffix is
# terminal text, as ``--output FILE`` always wrote.
SUFFIX_FORMATS = {
    ".json": "json",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".sarif": "sarif",
}


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file (None: it can). Proven by creating, then removing, a file beside
    it: permissions alone do not say (root ignores them; a read-only file system does not)."""
    try:
        if path.is_dir():
            return "is a directory"
        parent = path.parent
        if not parent.exists():
            return f"its directory {parent} does not exist (create it first)"
        if not parent.is_dir():
            return f"{parent} is not a directory"
        if path.exists() and not os.access(path, os.W_OK):
            return "is read-only"
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{path.name}.", suffix=".tmp"):
            pass
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        return f"cannot be written ({reason})"
    return None


def check_output(path: Path | None, option: str = "--output") -> None:
    """Before any work: one ``error:`` line and exit 2 where ``path`` cannot be written."""
    if path is None:
        return
    problem = output_problem(path)
    if problem is not None:
        typer.echo(f"error: {option} {path} {problem}", err=True)
        raise typer.Exit(EXIT_OPERATIONAL)


def report_format(fmt: str | None, output: Path | None) -> str:
    """The format to write: ``--format`` when given; else the one ``--output``'s suffix names; else terminal.
    A ``--format`` that contradicts the suffix is a usage error (a ``report.html`` holding JSON helps no one)."""
    named = _named_format(output)
    if fmt is None:
        return named or "terminal"
    if named is not None and named != fmt:
        typer.echo(
            f"error: --output {output} names {named} but --format is {fmt}: drop --format (the suffix decides) "
            "or rename the file",
            err=True,
        )
        raise typer.Exit(EXIT_OPERATIONAL)
    return fmt


def _named_format(output: Path | None) -> str | None:
    if output is None:
        return None
    if output.name.lower().endswith(".sarif.json"):
        return "sarif"
    return SUFFIX_FORMATS.get(output.suffix.lower())


def check_verbosity(verbose: bool, quiet: bool) -> None:
    if verbose and quiet:
        typer.echo("error: --verbose and --quiet contradict each other: give one", err=True)
        raise typer.Exit(EXIT_OPERATIONAL)


def write_atomically(path: Path, text: str) -> None:
    """``path`` holds ``text`` or what it held before, never part of it: written to a temporary file beside it,
    then renamed over it (with the permissions a new file gets, or the replaced file's)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(temporary, _mode_for(path))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def emit(text: str, output: Path | None) -> None:
    """The text on stdout, or in ``output`` with one ``wrote FILE`` line on stderr (as ``fix`` says it); a write
    that fails (a full disk) is one line and exit 2."""
    if output is None:
        sys.stdout.write(text)
        return
    try:
        write_atomically(output, text)
    except OSError as exc:
        typer.echo(f"error: cannot write --output {output}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_OPERATIONAL) from None
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
