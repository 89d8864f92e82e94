"""One pool of worker processes for ``audit``, ``scan`` and ``replay``: forked after the caller has loaded what the
work needs (tokenizers, templates, contexts), so that every worker shares it copy-on-write and starts in
milliseconds.

Why not ``concurrent.futures.ProcessPoolExecutor`` or ``multiprocessing.Pool``: the scan needs what neither gives
through a public call, each task bounded by the CPU time its worker spends on it (a render stuck in C code that no
signal interrupts is ended by SIGKILL), a worker that dies costing only the task it held (an executor marks the
whole pool broken and every pending task with it; ``multiprocessing.Pool`` waits forever for a result that never
comes), a task that can tell the caller something before it ends (the scan's picked tokenizer, kept for a
result of a worker killed mid-task), and Ctrl-C ending every worker at once (an executor waits for them; its
``terminate_workers`` exists only from Python 3.14). Each worker has one pipe and holds one task at a time.

CPU time, not wall time, decides a task's deadline (``/proc/PID/stat``), so that a loaded machine never changes a
result, counted from when the worker takes the task (it says so: a fresh worker's imports and initializer are not
the task's); a worker that holds a task ``WALL_BACKSTOP`` deadlines of wall time without using the CPU (blocked),
or never takes it, is ended too. Workers ignore SIGINT: the terminal sends Ctrl-C to the whole process group, and
the caller ends them (``terminate``) without a traceback from each.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from types import TracebackType
from typing import Any

from tito_audit.workers import interrupt

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
WALL_BACKSTOP = 10  # deadlines of wall time after which a worker that uses no CPU (blocked) is ended anyway
_POLL_S = 0.5  # longest wait between two looks at a Ctrl-C that a ``__del__`` swallowed (``interrupt``)


def default_jobs(tasks: int) -> int:
    """One worker per task, at most one per usable core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(tasks, cores))


@dataclass(frozen=True)
class Done:
    """A task's return value."""

    key: Any
    value: Any
    seconds: float


@dataclass(frozen=True)
class Raised:
    """A task raised: ``error`` is its exception (a ``RuntimeError`` carrying its text where it does not pickle),
    ``trace`` the worker's traceback."""

    key: Any
    error: BaseException
    trace: str
    seconds: float


@dataclass(frozen=True)
class Died:
    """The worker holding the task died (killed by the system, a crash in C code, ``os._exit``)."""

    key: Any
    exitcode: int | None
    seconds: float


@dataclass(frozen=True)
class Killed:
    """The task ran past its CPU deadline; its worker was ended (SIGKILL)."""

    key: Any
    deadline_s: float
    seconds: float


@dataclass(frozen=True)
class Told:
    """Something a task said before it ended (``tell``); the task goes on."""

    key: Any
    message: Any


Event = Done | Raised | Died | Killed | Told
Ended = Done | Raised | Died | Killed  # the events that end a task

_conn: Connection | None = None  # in a worker: the pipe to the parent, for ``tell``
_key: Any = None


def tell(message: Any) -> None:
    """From inside a task: send ``message`` to the caller now (a ``Told`` event). Does nothing outside a worker."""
    if _conn is not None:
        _conn.send(("told", _key, message))


def _worker_main(conn: Connection, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
    """A worker: runs ``initializer`` once, then each task it is given, until it is given None."""
    global _conn, _key
    interrupt.ignore_in_worker()  # the parent handles Ctrl-C and SIGTERM, and ends us
    if initializer is not None:
        initializer(*initargs)
    _conn = conn
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        _key, fn, args = task
        # the task's CPU clock starts here, not when it was sent: a fresh worker's imports and initializer are not
        # the task's (a loaded machine made them cost a 0.5 s deadline, and a task that never ran was "Killed")
        conn.send(("began", _key, time.process_time()))
        reply: tuple[Any, ...]
        try:
            reply = ("done", _key, fn(*args))
        except BaseException as exc:
            reply = ("raised", _key, exc, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as exc:  # the value or the exception does not pickle: its text does
            text = f"{type(exc).__name__}: {exc}"
            conn.send(("raised", _key, RuntimeError(f"a worker's result could not be sent back: {text}"), text))


class _Worker:
    """One process, its pipe, and the task it holds."""

    def __init__(self, ctx: Any, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, initializer, initargs), daemon=True)
        self.proc.start()
        child.close()
        self.key: Any = None
        self.busy = False
        self.since = 0.0
        self.cpu_since = 0.0
        self.began = False

    def give(self, key: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.conn.send((key, fn, args))
        self.key, self.busy, self.since, self.cpu_since = key, True, time.monotonic(), 0.0
        self.began = False  # the worker has not said it took the task (it may still be starting)

    def cpu_seconds(self) -> float:
        """The worker's CPU time (user + system) from /proc; 0 where unreadable (the wall backstop remains)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        except (OSError, ValueError, IndexError):
            return 0.0

    def past_deadline(self, elapsed: float, deadline_s: float) -> bool:
        """Past ``deadline_s`` of CPU time on its task since the worker took it, or ``WALL_BACKSTOP`` times that of
        wall time since it was sent (a worker that never takes it, or is blocked)."""
        if elapsed <= deadline_s:
            return False
        cpu = self.began and self.cpu_seconds() - self.cpu_since > deadline_s
        return cpu or elapsed > WALL_BACKSTOP * deadline_s

    def kill(self) -> None:
        if self.proc.is_alive() and self.proc.pid is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(5)
        self.conn.close()


class WorkerPool:
    """``workers`` processes running tasks ``submit``-ted as ``(key, fn, args)``; ``next`` gives their events.

    ``initializer(*initargs)`` runs once in each worker (and in each fresh one that replaces a worker that died or
    was ended). ``deadline_s``: the CPU seconds a task may take before its worker is ended (``Killed``). Tasks go
    to idle workers in the order they were submitted. Used as a context manager, the pool ends its workers on the
    way out: at once (SIGKILL) when leaving on an exception (Ctrl-C), after their current task otherwise.
    """

    def __init__(
        self,
        workers: int,
        initializer: Callable[..., None] | None = None,
        initargs: tuple[Any, ...] = (),
        deadline_s: float | None = None,
    ) -> None:
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the Rust pool must not be live across a fork
        methods = mp.get_all_start_methods()
        self._ctx = mp.get_context("fork" if "fork" in methods else "spawn")
        self._init = (initializer, initargs)
        self.deadline_s = deadline_s
        self._pending: deque[tuple[Any, Callable[..., Any], tuple[Any, ...]]] = deque()
        self._events: deque[Event] = deque()
        self._workers = [self._start() for _ in range(max(1, workers))]

    def _start(self) -> _Worker:
        return _Worker(self._ctx, *self._init)

    def submit(self, key: Any, fn: Callable[..., Any], *args: Any) -> None:
        """Queue ``fn(*args)``; its events carry ``key``. ``fn`` and ``args`` are pickled (``fn`` by name)."""
        self._pending.append((key, fn, args))

    def next(self) -> Event | None:
        """The next event (blocking until one comes), or None when no task is outstanding."""
        while not self._events:
            if not self._pending and not any(w.busy for w in self._workers):
                return None
            self._dispatch()
            self._collect()
        return self._events.popleft()

    def __iter__(self) -> Iterator[Event]:
        while (event := self.next()) is not None:
            yield event

    def _dispatch(self) -> None:
        for i, worker in enumerate(self._workers):
            if worker.busy or not self._pending:
                continue
            key, fn, args = self._pending[0]
            try:
                worker.give(key, fn, args)
            except (BrokenPipeError, OSError):  # died while idle: a fresh one takes the task
                worker.kill()
                self._workers[i] = self._start()
                continue
            self._pending.popleft()

    def _timeout(self, busy: list[_Worker]) -> float:
        if self.deadline_s is None or not busy:
            return _POLL_S
        now = time.monotonic()
        return min(_POLL_S, max(0.05, min(w.since + self.deadline_s - now for w in busy)))

    def _collect(self) -> None:
        """Wait for what the busy workers say (or their end, or a deadline) and turn it into events."""
        interrupt.check()
        busy = [w for w in self._workers if w.busy]
        if not busy:
            return
        ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], self._timeout(busy))
        for i, worker in enumerate(self._workers):
            if not worker.busy:
                continue
            elapsed = time.monotonic() - worker.since
            if worker.conn in ready:
                try:
                    message = worker.conn.recv()
                except (EOFError, OSError):
                    message = None  # died mid-message: below
                if message is not None and message[0] == "began":  # its CPU clock starts (the process's, as /proc)
                    worker.began, worker.cpu_since = True, float(message[2])
                    continue
                if message is not None:
                    self._events.append(self._event(worker, message, elapsed))
                    continue
            if worker.conn in ready or worker.proc.sentinel in ready:
                worker.proc.join(1)  # its pipe can close a moment before the process is reaped
                code = worker.proc.exitcode
                worker.kill()
                self._events.append(Died(worker.key, code, elapsed))
                self._workers[i] = self._start()
            elif self.deadline_s is not None and worker.past_deadline(elapsed, self.deadline_s):
                worker.kill()
                self._events.append(Killed(worker.key, self.deadline_s, elapsed))
                self._workers[i] = self._start()

    @staticmethod
    def _event(worker: _Worker, message: tuple[Any, ...], elapsed: float) -> Event:
        tag, key = message[0], message[1]
        if tag == "told":
            return Told(key, message[2])
        worker.busy = False
        if tag == "done":
            return Done(key, message[2], elapsed)
        return Raised(key, message[2], message[3], elapsed)

    def terminate(self) -> None:
        """End every worker now (SIGKILL): Ctrl-C, or an error that stops the caller."""
        self._pending.clear()
        for worker in self._workers:
            worker.kill()

    def close(self) -> None:
        """Let idle workers exit, then end what is left (a worker still busy is ended at once)."""
        for worker in self._workers:
            try:
                if not worker.busy:
                    worker.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for worker in self._workers:
            worker.proc.join(2 if not worker.busy else 0)
            worker.kill()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.terminate()


class RemoteError(Exception):
    """The traceback of an exception raised in a worker, chained to it when the caller raises it again."""

    def __init__(self, trace: str) -> None:
        super().__init__(f'\n"""\n{trace}"""')


def reraise(event: Raised) -> None:
    """Raise a worker's exception here, its traceback in the worker chained (as ``concurrent.futures`` does)."""
    raise event.error from RemoteError(event.trace)
