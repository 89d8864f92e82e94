"""The one worker pool (``tito_audit.workers``) that audit, scan and replay share: every task ends in exactly one
event, a worker's death or deadline costs only its own task, and what a task says before it ends reaches the
caller."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tito_audit.workers import Died, Done, Killed, Raised, RemoteError, Told, WorkerPool, reraise, tell


def square(x: int) -> int:
    return x * x


def fail(message: str) -> None:
    raise ValueError(message)


def die(code: int) -> None:
    os._exit(code)


def spin(seconds: float) -> str:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return "finished"


def chatty(x: int) -> int:
    tell(("picked", x))
    return x + 1


def unpicklable() -> object:
    return lambda: None


_STATE: dict[str, int] = {}


def remember(value: int) -> None:
    _STATE["value"] = value


def recall() -> int:
    return _STATE["value"]


def events_of(pool: WorkerPool) -> dict[object, list[object]]:
    out: dict[object, list[object]] = {}
    for event in pool:
        out.setdefault(event.key, []).append(event)
    return out


def test_every_task_ends_once_with_its_value() -> None:
    with WorkerPool(2) as pool:
        for i in range(7):
            pool.submit(i, square, i)
        got = events_of(pool)
    assert {k: [type(e) for e in v] for k, v in got.items()} == {i: [Done] for i in range(7)}
    assert {k: v[0].value for k, v in got.items()} == {i: i * i for i in range(7)}  # type: ignore[attr-defined]


def test_a_death_an_exception_and_a_deadline_cost_only_their_own_task() -> None:
    with WorkerPool(2, deadline_s=0.5) as pool:
        pool.submit("dies", die, 7)
        pool.submit("raises", fail, "boom")
        pool.submit("spins", spin, 30.0)
        pool.submit("after", square, 3)
        got = events_of(pool)
    died, raised, killed, after = got["dies"][0], got["raises"][0], got["spins"][0], got["after"][0]
    assert isinstance(died, Died) and died.exitcode == 7
    assert isinstance(raised, Raised) and isinstance(raised.error, ValueError) and "boom" in raised.trace
    assert isinstance(killed, Killed) and killed.deadline_s == 0.5
    assert isinstance(after, Done) and after.value == 9


def test_a_deadline_counts_the_task_s_cpu_not_the_worker_s_start() -> None:
    """Found by the full suite on a loaded machine: a fresh worker's start-up CPU counted against its first task,
    and a task that exits at once was reported as Killed at its 0.5 s deadline. The clock starts when the worker
    takes the task: every worker here spends 1 s of CPU starting (twice the deadline), every task ends at once."""
    with WorkerPool(2, spin, (1.0,), deadline_s=0.5) as pool:
        pool.submit("dies", die, 7)
        pool.submit("quick", square, 4)
        pool.submit("after", square, 5)
        got = events_of(pool)
    assert isinstance(got["dies"][0], Died) and got["dies"][0].exitcode == 7
    assert isinstance(got["quick"][0], Done) and got["quick"][0].value == 16
    assert isinstance(got["after"][0], Done) and got["after"][0].value == 25


def test_a_deadline_counts_cpu_not_waiting() -> None:
    """A task that sleeps past the deadline is not ended (a loaded machine must not change a result)."""
    with WorkerPool(1, deadline_s=0.3) as pool:
        pool.submit("sleeps", time.sleep, 1.0)
        got = events_of(pool)
    assert isinstance(got["sleeps"][0], Done)


def test_a_task_tells_the_caller_before_it_ends() -> None:
    with WorkerPool(1) as pool:
        pool.submit("a", chatty, 1)
        got = events_of(pool)
    told, done = got["a"]
    assert isinstance(told, Told) and told.message == ("picked", 1)
    assert isinstance(done, Done) and done.value == 2


def test_a_value_that_does_not_pickle_is_an_exception_not_a_hang() -> None:
    with WorkerPool(1) as pool:
        pool.submit("x", unpicklable)
        got = events_of(pool)
    assert isinstance(got["x"][0], Raised) and "could not be sent back" in str(got["x"][0].error)


def test_the_initializer_runs_in_every_worker_also_a_fresh_one() -> None:
    with WorkerPool(1, remember, (41,)) as pool:
        pool.submit(1, die, 3)
        pool.submit(2, recall)
        got = events_of(pool)
    assert isinstance(got[1][0], Died) and got[2][0].value == 41  # type: ignore[attr-defined]


def test_reraise_chains_the_workers_traceback() -> None:
    with WorkerPool(1) as pool:
        pool.submit(1, fail, "deep")
        event = pool.next()
    assert isinstance(event, Raised)
    with pytest.raises(ValueError, match="deep") as caught:
        reraise(event)
    assert isinstance(caught.value.__cause__, RemoteError) and "fail" in str(caught.value.__cause__)


def test_leaving_on_an_exception_ends_the_workers_at_once() -> None:
    with pytest.raises(KeyboardInterrupt), WorkerPool(2) as pool:
        pool.submit(1, spin, 60.0)
        pool.submit(2, spin, 60.0)
        pids = [w.proc.pid for w in pool._workers]
        started = time.monotonic()
        raise KeyboardInterrupt
    assert time.monotonic() - started < 10
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # gone, or a zombie
