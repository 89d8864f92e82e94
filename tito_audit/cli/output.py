"""Where a command's text goes: a file with ``--output``, else stdout (stderr carries errors and progress).

``-`` names standard output, as for any Unix tool. A file is checked before any work (``check_output``: a
directory, a FIFO, a device or a socket, a missing directory, a read-only or impossible path is one line and exit
2, never a traceback after a whole audit, and never a device or a pipe replaced by a file; no directory is
created), and written atomically (``write_atomically``: a temporary file beside it, then a rename), so that an
interrupted or failed write never leaves half a report where the last one was. A symlink is written through: the
file it points to is replaced (atomically, beside it), the link stays a link.
"""

from __future__ import annotations

import errno
import os
import stat
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


STDOUT = "-"  # as a file name: standard output


def is_stdout(path: Path | str | None) -> bool:
    return path is not None and str(path) == STDOUT


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is, in words (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def target(path: Path) -> Path:
    """The file a write to ``path`` replaces: ``path`` itself, or what its symlinks lead to (written through)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file (None: it can). Proven by creating, then removing, a file beside
    the file it names (through its symlinks): permissions alone do not say (root ignores them; a read-only file
    system does not)."""
    if is_stdout(path):
        return None
    try:
        real = target(path)
        via = f" (a symlink to {real})" if real != path else ""
        try:
            kind = _kind(real.stat().st_mode)
        except (FileNotFoundError, NotADirectoryError):  # nothing there yet (or a file where a folder should be)
            kind = None
        if kind is not None:
            hint = "" if kind == "a directory" else ": give a regular file, or - for standard output"
            return f"is {kind}{via}{hint}"
        parent = real.parent
        if not parent.exists():
            return f"the directory {parent} does not exist{via} (create it first)"
        if not parent.is_dir():
            return f"{parent} is not a directory{via}"
        if real.exists() and not os.access(real, os.W_OK):
            return f"is read-only{via}"
        with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{real.name}.", suffix=".tmp"):
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
        typer.echo(f"error: {option} {path}: {problem}", err=True)
        raise typer.Exit(EXIT_OPERATIONAL)


def _no_folder_in(folder: Path) -> str | None:
    """Why no folder can be made in ``folder`` (None: one can). Proven by making, then removing, one: permissions
    alone do not say (root ignores them; ``/proc`` and read-only file systems refuse all the same)."""
    try:
        os.rmdir(tempfile.mkdtemp(dir=folder, prefix=".tito-audit-"))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_output_folder(path: Path | None, option: str) -> None:
    """Before any work, for an option that names a folder to write files in (created if missing): one ``error:``
    line and exit 2 where it is a file, a FIFO or a device, or where no folder can be made there."""
    if path is None:
        return
    problem = None
    if is_stdout(path):
        problem = "names a folder to write files in; - (standard output) is for one file"
    elif path.is_symlink() and not path.exists():
        problem = f"is a symlink to {os.readlink(path)}, which does not exist"
    elif path.exists():
        kind = _kind(path.stat().st_mode) or "a file"
        if kind != "a directory":
            problem = f"is {kind}, not a folder"
        elif (why := _no_folder_in(path)) is not None:
            problem = f"is a folder that cannot be written ({why})"
    else:
        ancestor = path.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            problem = f"cannot be made: {ancestor} is not a directory"
        elif (why := _no_folder_in(ancestor)) is not None:
            problem = f"cannot be made in {ancestor} ({why})"
    if problem is not None:
        typer.echo(f"error: {option} {path}: {problem}", err=True)
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
    if output is None or is_stdout(output):
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
    then renamed over it (with the permissions a new file gets, or the replaced file's). ``-`` is standard output;
    a symlink is written through (the file it leads to is replaced, the link kept); anything but a regular file
    (a FIFO, a device, a directory) is refused with ``OSError``, never replaced."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = target(path)
    try:
        kind = _kind(path.stat().st_mode)
    except FileNotFoundError:
        kind = None
    if kind is not None:  # checked before the work too (``check_output``); here for a library caller
        raise OSError(errno.EEXIST, f"is {kind}: not replaced by a file", str(path))
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


def emit(text: str, output: Path | None, announce: bool = True) -> None:
    """The text on stdout (no ``output``, or ``-``), or in ``output`` with one ``wrote FILE`` line on stderr (as
    ``fix`` says it; not with ``announce`` False: an interrupted run says it in its one line); a write that fails
    (a full disk) is one line and exit 2."""
    if output is None or is_stdout(output):
        sys.stdout.write(text)
        return
    try:
        write_atomically(output, text)
    except OSError as exc:
        typer.echo(f"error: cannot write --output {output}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_OPERATIONAL) from None
    if announce:
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
    if not (made.is_terminal or os.environ.get("COLUMNS", "").strip()):
        made = Console(stderr=stderr, width=PIPE_WIDTH)
    made.on_broken_pipe = _broken_pipe  # type: ignore[method-assign]
    return made


def _broken_pipe() -> None:
    """rich ends a broken pipe with exit 1, the code of findings; the command's main ends it as a SIGPIPE would."""
    raise BrokenPipeError(errno.EPIPE, "the reader closed standard output")
