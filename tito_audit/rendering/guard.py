"""Bounds for untrusted template code: wall-clock time per render and size of the rendered text.

The timer uses SIGALRM, which only fires in a process's main thread; elsewhere (a worker thread) only the
size bound applies, so parallel audits use processes, never threads.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class RenderLimits:
    seconds: float = 2.0
    max_chars: int = 2_000_000


class RenderTimeout(Exception):
    """A render ran past its time limit."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def _expire(signum: int, frame: object) -> None:
        raise RenderTimeout(f"render exceeded {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
