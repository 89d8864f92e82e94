"""Bounds for untrusted template code: time, memory and output size per render, and a sandbox that refuses
loudly.

Three layers, cheapest first:

* ``harden_environment`` makes the compiled template's sandbox *raise* ``SecurityError`` on any unsafe
  attribute access (``__class__``, ``__globals__``, ``mro``...), including through ``str.format`` and
  ``|attr``. Stock jinja returns a silent undefined there, so ``{{ ''.__class__ }}`` would render as
  ``""`` and the attempt would go unreported.
* ``render_limits`` bounds one render: a SIGPROF timer on the process's CPU time and an address-space budget
  (``RLIMIT_AS``, lowered for the duration of the render) so that exponential string growth fails with
  ``MemoryError`` at about ``memory_bytes`` instead of eating the machine. CPU time, not wall time: a loop
  that never ends burns CPU all the same, while a busy machine (a scan's workers, CI neighbours) stretches
  wall time and would time out an ordinary render, so the same template would get a different report on a
  loaded machine. The render thread's own CPU time: the process-wide timer is re-armed while other threads
  (a trainer's) have spent part of it. Both bounds are process-wide, so they only apply in a process's main
  thread; elsewhere only the output-size check (done by the renderer) applies. Parallel audits use processes.
* ``limit_process_memory`` caps a whole worker process (the scan's pool also kills a worker past a hard
  deadline).
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from jinja2.exceptions import SecurityError

try:  # ``signal.signal`` without the enum conversions around it (they cost more than a small render)
    from _signal import signal as _set_handler
except ImportError:  # another interpreter
    _set_handler = signal.signal


@dataclass(frozen=True)
class RenderLimits:
    seconds: float = 2.0
    max_chars: int = 2_000_000
    memory_bytes: int = 1 << 30  # extra address space one render may take (0: no per-render budget)
    # Per template, over all its renders (``budget``): CPU seconds, and renders past their time or memory limit
    # (0: none, the default for a library caller's renderer, whose renders never end; ``AUDIT_LIMITS`` for audits)
    template_cpu_seconds: float = 0.0
    template_limit_hits: int = 0
    # characters all its renders may produce: each render's output is tokenized and compared after the render (work
    # the render's CPU does not count), so a template that renders megabytes in milliseconds is bounded here
    template_output_chars: int = 0


# What an audit renders under (``audit``, ``fix``, ``table``, ``scan``): the per-render limits, and a per-template
# budget of 3 s of render CPU in all, two renders past a limit, and 16,000,000 characters of output. A real template's
# renders take a tenth of a second of CPU and produce under 0.5 MB in a whole audit (``rendering.budget``).
AUDIT_LIMITS = RenderLimits(template_cpu_seconds=3.0, template_limit_hits=2, template_output_chars=16_000_000)
# ``replay`` renders as many times as its log has turns: no CPU total, but a template that hits its limits twice
# is stopped all the same.
REPLAY_LIMITS = RenderLimits(memory_bytes=0, template_limit_hits=2)


class RenderTimeout(BaseException):
    """A render ran past its time limit.

    A ``BaseException`` so that no ``except Exception`` between the template and the renderer can swallow it.
    """


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


_REFIRE_S = 0.05

# In a process of the audit's own (a scan worker: ``keep_timer_handler``), SIGPROF's handler stays installed and
# passes the signal to the limit armed now; elsewhere each limit installs it for its block and puts back what was
# there (a library caller's process may use SIGPROF itself). ``_armed`` is the limit armed now in either mode: a
# signal for any other limit (one whose block has ended) is stale, and does nothing.
_handler_kept = False
_armed: time_limit | None = None


def _on_timer(signum: int, frame: object) -> None:
    limit = _armed
    if limit is not None:
        limit._expire(signum, frame)


def keep_timer_handler() -> None:
    """For a process that only audits (a scan worker): SIGPROF's handler stays the render limits' from now on,
    so that arming a limit costs two timer calls instead of two more handler swaps on each of thousands of
    renders. Irreversible by design, as ``limit_process_memory``."""
    global _handler_kept
    _set_handler(signal.SIGPROF, _on_timer)
    _handler_kept = True


class time_limit:
    """Raise ``RenderTimeout`` in the block once this thread has spent ``seconds`` of CPU time in it.

    A class, not a generator: renders are guarded by the thousand, and a generator's frames would cost a good
    part of a small render.

    The timer's signal is handled between two bytecodes, anywhere: also while the block is being left. A limit
    that raised there would skip the rest of ``__exit__`` and leave its timer re-arming and its handler installed,
    to raise in whatever runs next (red team 49: after a template stopped by its budget, the next model's load
    died with a traceback, and the run lost every model). So the signal does nothing once the limit is no longer
    the one armed, nor while one of the limits' own ``__exit__`` runs (the block is over; ``__exit__`` disarms), and
    ``__exit__`` may be called again: a guard that caught ``RenderTimeout`` outside the block calls it to make sure
    (``Renderer``)."""

    __slots__ = ("_armed", "_previous", "_previous_handler", "_started", "seconds")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._armed = False

    def _expire(self, signum: int, frame: object) -> None:
        if _armed is not self or getattr(frame, "f_code", None) in _LEAVING:
            return  # a stale signal, or the block is being left: nothing to stop
        # The timer counts the whole process's CPU; the limit is this thread's. Other threads (a trainer's) may
        # have spent some of it: wait for the rest.
        left = self.seconds - (time.thread_time() - self._started)
        if left > 0.001:
            signal.setitimer(signal.ITIMER_PROF, left)
            return
        # Raised inside a garbage-collector callback or a finalizer, the exception is only reported, never seen by
        # the render: fire again shortly until it is (``__exit__`` disarms the timer).
        signal.setitimer(signal.ITIMER_PROF, _REFIRE_S)
        raise RenderTimeout(f"render exceeded {self.seconds:g}s of CPU time")

    def __enter__(self) -> None:
        global _armed
        if self.seconds <= 0 or not _in_main_thread():
            return
        self._started = time.thread_time()
        if not _handler_kept:
            self._previous_handler = _set_handler(signal.SIGPROF, _on_timer)
        self._previous, _armed = _armed, self
        self._armed = True
        signal.setitimer(signal.ITIMER_PROF, self.seconds)

    def __exit__(self, *exc: object) -> None:
        global _armed
        if self._armed:
            self._armed = False
            _armed = self._previous
            signal.setitimer(signal.ITIMER_PROF, 0)
            if not _handler_kept:
                _set_handler(signal.SIGPROF, self._previous_handler)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def address_space_bytes() -> int:
    """This process's current virtual size (what RLIMIT_AS is compared with); 0 where unknown."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


_SIZE_TTL_S = 0.25
_size_seen = [-1.0, 0]  # (when, bytes): the size read last


def _recent_address_space_bytes() -> int:
    """``address_space_bytes`` read at most every 0.25 s: a render budget of a gigabyte does not need the size
    to the page, and reading /proc costs more than the small renders an audit does by the thousand."""
    now = time.monotonic()
    if now - _size_seen[0] > _SIZE_TTL_S:
        _size_seen[:] = [now, address_space_bytes()]
    return int(_size_seen[1])


class memory_limit:
    """Lower the soft RLIMIT_AS to the current size plus ``extra_bytes`` for the duration of the block."""

    __slots__ = ("_restore", "extra_bytes")

    def __init__(self, extra_bytes: int) -> None:
        self.extra_bytes = extra_bytes
        self._restore: tuple[int, int] | None = None

    def __enter__(self) -> None:
        current = _recent_address_space_bytes() if self.extra_bytes > 0 else 0
        if current == 0:
            return
        target = current + self.extra_bytes
        if 0 < _process_cap <= target:
            return  # this process's own cap (``limit_process_memory``) is already tighter: no system call to see it
        if not _in_main_thread():
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            target = min(target, hard)
        if soft != resource.RLIM_INFINITY and soft <= target:
            return  # an outer limit (a scan worker's) is already tighter
        resource.setrlimit(resource.RLIMIT_AS, (target, hard))
        self._restore = (soft, hard)

    def __exit__(self, *exc: object) -> None:
        if self._restore is not None:
            restore, self._restore = self._restore, None
            resource.setrlimit(resource.RLIMIT_AS, restore)


class render_limits:
    """Time and memory bounds for one render."""

    __slots__ = ("_memory", "_time")

    def __init__(self, limits: RenderLimits) -> None:
        self._memory = memory_limit(limits.memory_bytes)
        self._time = time_limit(limits.seconds)

    def __enter__(self) -> None:
        self._memory.__enter__()
        try:
            self._time.__enter__()
        except BaseException:
            self._memory.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self._time.__exit__()
        finally:
            self._memory.__exit__()


# The code objects during which a timer signal is not a limit's to raise: the block is being left.
_LEAVING = frozenset(f.__code__ for f in (time_limit.__exit__, render_limits.__exit__, memory_limit.__exit__))

_process_cap = 0  # the soft RLIMIT_AS ``limit_process_memory`` set (0: none); ``memory_limit`` restores what it lowers


def limit_process_memory(total_bytes: int) -> None:
    """Cap this whole process's address space (for worker processes; irreversible by design)."""
    global _process_cap
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        total_bytes = min(total_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (total_bytes, hard))
    _process_cap = total_bytes


def _refuse(obj: Any, attribute: str) -> Any:
    raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")


def harden_environment(environment: Any) -> None:
    """Make a jinja sandbox raise on unsafe attribute access instead of returning a silent undefined."""
    if hasattr(environment, "unsafe_undefined"):
        environment.unsafe_undefined = _refuse
