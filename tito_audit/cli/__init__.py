"""The ``tito-audit`` command line: a thin typer layer over the library.

Each sub-command lives in its own module with a ``register(app)`` function. ``tito-audit MODEL`` is the short
form of ``tito-audit audit MODEL``.
"""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    name="tito-audit",
    help="Audit whether a model's chat template keeps the Token-In, Token-Out invariant for RL rollouts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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
    """``tito-audit MODEL ...`` -> ``tito-audit audit MODEL ...``."""
    if not argv:
        return argv
    known = {c.name or "" for c in app.registered_commands} | {"--help", "-h", "--version"}
    first = argv[0]
    if first in known:
        return argv
    return ["audit", *argv]


def main() -> None:
    app(args=_with_default_command(sys.argv[1:]), prog_name="tito-audit")
