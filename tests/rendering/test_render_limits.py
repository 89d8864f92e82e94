"""The per-render time limit counts CPU time, so a loaded machine does not turn an ordinary render into a
timeout (the corpus scan once reported 5 ``scenario_timeout`` flags only because other processes held the CPUs),
while a template that never stops computing is still cut off."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import ROOT
from tito_audit.rendering.guard import RenderTimeout, time_limit


def test_waiting_is_not_rendering() -> None:
    with time_limit(0.2):
        time.sleep(0.5)  # wall time passes, no CPU is spent: what a render sees when the machine is busy


def test_computing_past_the_limit_is_stopped() -> None:
    start = time.process_time()
    with pytest.raises(RenderTimeout, match="CPU time"), time_limit(0.2):
        while True:
            pass
    assert 0.15 < time.process_time() - start < 2.0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed one, on purpose
def test_a_timeout_swallowed_by_a_finalizer_fires_again() -> None:
    """A timeout that lands in a finalizer (or a gc callback) is only reported there: the timer fires again, so
    the render is still stopped (CI once saw a compile run on after its timeout was swallowed by hypothesis'
    gc callback)."""

    class Spin:
        def __del__(self) -> None:
            end = time.thread_time() + 0.3  # the limit passes in here
            while time.thread_time() < end:
                pass

    start = time.process_time()
    with pytest.raises(RenderTimeout), time_limit(0.1):
        Spin()
        while time.process_time() - start < 3.0:
            pass
    assert time.process_time() - start < 1.0


def test_a_scan_worker_is_judged_by_the_cpu_it_spent() -> None:
    """The per-template deadline of the scan's pool counts the worker's CPU time too: a worker that waits (a
    busy machine) is not killed at the deadline, one that computes is."""
    import multiprocessing as mp

    from tito_audit.workers.pool import _Worker

    slot = _Worker(mp.get_context("fork"), None, ())
    try:
        slot.began, slot.cpu_since = True, slot.cpu_seconds()  # the worker took the template now
        assert not slot.past_deadline(elapsed=1.5, deadline_s=1.0)  # idle worker: waiting is not working
        assert slot.past_deadline(elapsed=10.5, deadline_s=1.0)  # but not forever (blocked in C code)
        slot.cpu_since -= 2.0  # as if it had computed for two CPU seconds since the template came
        assert slot.past_deadline(elapsed=1.5, deadline_s=1.0)
        slot.began = False  # CPU spent before it took the template (its start) is not the template's
        assert not slot.past_deadline(elapsed=1.5, deadline_s=1.0)
    finally:
        slot.kill()


def test_other_threads_do_not_spend_a_renders_budget() -> None:
    """In a trainer's process other threads burn CPU while a render runs: the limit is the render thread's own."""
    import threading

    def spin() -> None:
        end = time.thread_time() + 0.6
        while time.thread_time() < end:
            pass

    worker = threading.Thread(target=spin)
    with time_limit(0.2):
        worker.start()
        worker.join()  # 0.6 s of the process's CPU, none of this thread's


def _in_fresh_process(code: str) -> list[str]:
    """What ``code`` prints, run in a process of its own (what it sets up cannot be undone)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_worker_that_keeps_the_timer_handler_is_limited_alike() -> None:
    """A scan worker keeps SIGPROF's handler installed (``keep_timer_handler``): waiting is still not rendering, a
    render that computes past its limit is still stopped, and a timer signal with no limit armed is ignored
    (SIGPROF's default action ends the process)."""
    printed = _in_fresh_process(
        """
        import signal, time
        from tito_audit.rendering.guard import RenderTimeout, keep_timer_handler, time_limit
        keep_timer_handler()
        with time_limit(0.2):
            time.sleep(0.4)
        print("waited")
        try:
            with time_limit(0.2):
                while True:
                    pass
        except RenderTimeout:
            print("stopped")
        signal.setitimer(signal.ITIMER_PROF, 0.01)
        end = time.process_time() + 0.2
        while time.process_time() < end:
            pass
        print("alive")
        """
    )
    assert printed == ["waited", "stopped", "alive"]


def test_a_render_budget_wider_than_the_process_cap_keeps_the_cap() -> None:
    """Under a worker's own cap (``limit_process_memory``), a render budget that would not be tighter is left out
    without asking the kernel, and the cap still stops the render; a tighter one is still set, and undone."""
    printed = _in_fresh_process(
        """
        import resource
        from tito_audit.rendering import guard
        cap = guard.address_space_bytes() + (512 << 20)
        guard.limit_process_memory(cap)
        asked = []
        getrlimit = resource.getrlimit
        resource.getrlimit = lambda which: asked.append(which) or getrlimit(which)
        with guard.memory_limit(1 << 30):
            print(len(asked), getrlimit(resource.RLIMIT_AS)[0] == cap)
            try:
                block = bytearray(1 << 30)
            except MemoryError:
                print("refused")
        with guard.memory_limit(64 << 20):
            print(len(asked), getrlimit(resource.RLIMIT_AS)[0] < cap)
        print(getrlimit(resource.RLIMIT_AS)[0] == cap)
        """
    )
    assert printed == ["0", "True", "refused", "1", "True", "True"]


@pytest.mark.parametrize("kept", [False, True])
def test_a_signal_handled_while_the_block_is_left_neither_raises_nor_rearms(kept: bool) -> None:
    """Red team 49: the timer's signal is handled between two bytecodes, anywhere, also inside ``__exit__``. A
    limit that raised there skipped the rest of ``__exit__``: its timer re-armed every 50 ms with its handler still
    installed, and raised in whatever ran next (the next model's load: the run lost every model). Handled while a
    limit's ``__exit__`` runs, or after its block (a stale signal), the signal does nothing; ``__exit__`` may be
    called again. Played here deterministically: the handler is called as the signal would call it, with the
    frame it would see."""
    printed = _in_fresh_process(
        f"""
        import signal, sys, time
        from tito_audit.rendering import guard
        from tito_audit.rendering.guard import keep_timer_handler, render_limits, time_limit, RenderLimits
        if {kept}:
            keep_timer_handler()
        limit = time_limit(0.05)
        with limit:
            end = time.thread_time() + 0.01
            while time.thread_time() < end:
                pass
            limit._started -= 1.0  # its time is up
            class Frame:
                f_code = time_limit.__exit__.__code__
            guard._on_timer(signal.SIGPROF, Frame())  # handled as __exit__ begins: the block is over
            print("quiet-in-exit", signal.getitimer(signal.ITIMER_PROF)[0] > 0.01)
        guard._on_timer(signal.SIGPROF, sys._getframe())  # a stale signal after the block
        limit._expire(signal.SIGPROF, sys._getframe())
        limit.__exit__()
        print("after", signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0), guard._armed)
        both = render_limits(RenderLimits(seconds=0.05))
        try:
            with both:
                while True:
                    pass
        except guard.RenderTimeout:
            both.__exit__()
        print("stopped", signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0), guard._armed)
        """
    )
    assert printed == ["quiet-in-exit", "True", "after", "True", "None", "stopped", "True", "None"]


def test_a_template_stopped_by_its_budget_leaves_no_timer_behind(tmp_path) -> None:
    """Red team 49's template (two hundred megabytes a message) is stopped by its budget; the audits after it in
    the same process run as usual, and no timer is left armed."""
    import signal

    from tito_audit import audit_model, load
    from tito_audit.audit.context import AuditOptions

    flood = tmp_path / "flood.jinja"
    flood.write_text('{% for m in messages %}{% for i in range(200) %}{{ "x" * 1000000 }}{% endfor %}{% endfor %}')
    stopped = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(flood)), AuditOptions())
    assert stopped.verdict == "error"
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
    assert audit_model(load("qwen3-0.6b"), AuditOptions(scenarios="quick")).verdict != "error"
