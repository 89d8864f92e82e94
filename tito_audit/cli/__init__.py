"""The ``tito-audit`` command line: a thin typer layer over the library.

Each sub-command lives in its own module with a ``register(app)`` function. ``tito-audit MODEL`` is the short
form of ``tito-audit audit MODEL``. Every usage error, whichever option or command it comes from, is one line
on stderr (``error: ...``) and exit code 2.
"""

from __future__ import annotations

import difflib
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x carries its own copy of click
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer on the real click
    from click import exceptions as click_errors  # type: ignore[no-redef]

from tito_audit._version import __version__
from tito_audit.errors import EXIT_INTERRUPTED, EXIT_OPERATIONAL, EXIT_TERMINATED
from tito_audit.workers import interrupt


class OneLineErrors(TyperGroup):
    """A typer group whose usage errors are one ``error:`` line instead of a usage box."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click_errors.NoArgsIsHelpError:
            rv = EXIT_OPERATIONAL  # typer has printed the help already
        except click_errors.ClickException as exc:
            typer.echo(f"error: {usage_line(exc)}", err=True)
            rv = exc.exit_code
        except BrokenPipeError:  # the reader closed our stdout (`| head`): stop quietly, as a SIGPIPE would
            _silence_stdout()
            rv = EXIT_BROKEN_PIPE
        except OSError as exc:
            if exc.errno not in _OUTPUT_ERRNOS:
                raise
            _silence_stdout()  # what is still buffered cannot be written either
            typer.echo(f"error: cannot write the output: {exc.strerror or exc}", err=True)
            rv = EXIT_OPERATIONAL
        except typer.Abort as exc:
            if isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt):
                typer.echo("interrupted before the command started: nothing written", err=True)  # no traceback
                rv = EXIT_INTERRUPTED
            else:
                typer.echo("Aborted!", err=True)
                rv = 1
        if interrupt.seen() and rv != EXIT_INTERRUPTED:  # a Ctrl-C the run swallowed (in a __del__) is not lost
            typer.echo("interrupted (Ctrl-C came as the run ended: what it wrote is whole)", err=True)
            rv = EXIT_INTERRUPTED
        code = rv if isinstance(rv, int) else 0
        if code == EXIT_INTERRUPTED and interrupt.terminated():
            code = EXIT_TERMINATED  # SIGTERM, answered as Ctrl-C is, says which signal it was
        if standalone_mode and code in (EXIT_INTERRUPTED, EXIT_TERMINATED) and interrupt.seen():
            _exit_now(code)
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx: Any) -> Any:
        """A Ctrl-C that no command turned into its own line (each says what it kept) ends here: one line, 130."""
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # the reader closed our stdout (`| head`); click would make it exit 1 (findings)
            _silence_stdout()
            raise typer.Exit(EXIT_BROKEN_PIPE) from None
        except KeyboardInterrupt:
            command = f"tito-audit {ctx.invoked_subcommand}" if ctx.invoked_subcommand else "tito-audit"
            typer.echo(f"interrupted: {command} stopped before its end; nothing more was written", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None


EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader went away
# errors of a write to an output that cannot take it (a full disk, /dev/full, an I/O error): one line, exit 2
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT})


def _exit_now(code: int) -> None:
    """Exit with ``code`` after a Ctrl-C the command has answered, by ``compat.exit_now``: the streams flushed and
    the exit handlers run, then ``os._exit``. Not ``sys.exit``: after a Ctrl-C the command had caught and answered,
    CPython sometimes ended the process by killing itself with SIGINT once it had finalized (exit -2, no
    traceback; it does so where it saw a ``KeyboardInterrupt`` leave code it ran, even one caught after), so a
    ``fix`` that said "interrupted" and chose 130 exited -2 about one run in ten (``tests/cli/test_interrupt.py``).
    Nothing is left to run after this point but the interpreter's own teardown."""
    from tito_audit import compat

    compat.exit_now(code)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that flushing what is left at exit raises nothing more."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no descriptor (a test's capture): nothing to flush there
        pass


def usage_line(exc: click_errors.ClickException) -> str:
    """click's message on one line, in the style of every other ``error:`` line (lower-case start)."""
    message = " ".join(exc.format_message().split())
    return message[:1].lower() + message[1:]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tito-audit {__version__}")
        raise typer.Exit(0)


app = typer.Typer(
    name="tito-audit",
    cls=OneLineErrors,
    help="Audit whether a model's chat template keeps the Token-In, Token-Out invariant for RL rollouts. "
    "`tito-audit MODEL...` is short for `tito-audit audit MODEL...`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command, as every Unix tool
)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", callback=_version, is_eager=True
    ),
) -> None:
    """Audit whether a model's chat template keeps the Token-In, Token-Out invariant for RL rollouts.

    `tito-audit MODEL...` is short for `tito-audit audit MODEL...`.
    """


# Sub-command modules, in help order. Each defines register(app).
COMMANDS = ("audit", "table", "scan", "fix", "rl", "replay")


def _register_all() -> None:
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"tito_audit.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tito_audit.cli.{name}":
                raise
            continue
        module.register(app)


_register_all()


def _with_default_command(argv: list[str]) -> list[str]:
    """``tito-audit MODEL ...`` -> ``tito-audit audit MODEL ...``. A first word that is close to a command and
    names no model (``audti``) is a typo of the command, refused with the suggestion: audited as a model, it would
    audit the rest and fail on a model named ``audti``."""
    if not argv:
        return argv
    commands = [c.name or "" for c in app.registered_commands]
    first = argv[0]
    if first in {*commands, "--help", "-h", "--version"}:
        return argv
    close = difflib.get_close_matches(first, commands, n=1, cutoff=0.6)
    if close and not first.startswith("-") and "/" not in first and not _names_a_model(first):
        raise CommandTypo(first, close[0])
    return ["audit", *argv]


class CommandTypo(Exception):
    def __init__(self, given: str, command: str) -> None:
        super().__init__(
            f"no command {given!r}: did you mean `tito-audit {command}`? (a model named {given!r}: "
            f"`tito-audit audit {given}`)"
        )


def _names_a_model(word: str) -> bool:
    """A local folder or a bundled name: ``tito-audit WORD`` audits it, however close WORD is to a command."""
    from pathlib import Path

    from tito_audit.sources.bundled import bundled_names

    return Path(word).exists() or word in bundled_names()


def main() -> None:
    interrupt.install()  # a Ctrl-C is remembered, so that no __del__ can swallow it
    try:
        argv = _with_default_command(sys.argv[1:])
    except CommandTypo as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_OPERATIONAL)
    app(args=argv, prog_name="tito-audit")
