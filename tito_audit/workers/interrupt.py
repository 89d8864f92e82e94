"""Ctrl-C, and SIGTERM, that are never swallowed.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be when SIGINT arrives. Inside a
``__del__`` or a weakref callback it cannot propagate: the interpreter prints ``Exception ignored in ...`` and goes
on, and a command would finish its work as if nothing had happened and exit with the code of the finished run.
``install`` puts a handler in place that remembers the interrupt before raising it, and silences that one
message (the interrupt is not lost: it is remembered); the worker pool looks at the mark between two events
(``check``), and the command line reads it (``seen``) before it chooses an exit code.

SIGTERM (what ``timeout``, a batch scheduler or ``kill`` send before SIGKILL) is an interrupt too: without a
handler it ended the process at once, and a run of many models lost the reports of those it had finished. It
goes the way of Ctrl-C (what finished is written, marked incomplete), and the command exits 143 (``terminated``).
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType
from typing import Any

_seen = False
_terminated = False
_installed = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _seen, _terminated
    _seen = True
    _terminated = _terminated or signum == signal.SIGTERM
    raise KeyboardInterrupt


def _unraisable(hook: Any) -> Any:
    def quiet(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            return  # remembered by the handler: ``check`` raises it again where it can propagate
        hook(unraisable)

    return quiet


def install() -> None:
    """In the main thread of a command's process: remember every SIGINT (and SIGTERM) before raising it."""
    global _installed
    if _installed or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return  # someone else (a test runner, an embedding program) handles Ctrl-C: leave theirs
    signal.signal(signal.SIGINT, _on_sigint)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # one set by an embedding program is left in place
        signal.signal(signal.SIGTERM, _on_sigint)
    sys.unraisablehook = _unraisable(sys.unraisablehook)
    _installed = True


def ignore_in_worker() -> None:
    """In a worker process: neither Ctrl-C nor SIGTERM ends it (a terminal, ``timeout`` or a scheduler signals the
    whole process group); its parent answers them and ends it (SIGKILL)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def terminated() -> bool:
    """Whether the interrupt ``seen`` reports came as SIGTERM (the command then exits 143, not 130)."""
    return _terminated


def seen() -> bool:
    """Whether Ctrl-C came since ``install`` (whether or not its ``KeyboardInterrupt`` got anywhere)."""
    return _seen


def check() -> None:
    """Raise ``KeyboardInterrupt`` again if Ctrl-C came and was swallowed (in a ``__del__``, say)."""
    if _seen:
        raise KeyboardInterrupt
