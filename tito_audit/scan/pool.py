"""Worker processes with hard limits: a runaway template costs one worker, never the scan.

Workers are forked after the tokenizers are loaded, so they share them copy-on-write and start in
milliseconds. Each worker caps its own address space (``RLIMIT_AS``), every render inside it is bounded by
``RenderLimits``, and the parent kills a worker that spends more than ``deadline_s`` of CPU time on one template
(a render stuck in C code that no signal interrupts) and starts a fresh one. CPU time, as for the render limit,
so that a loaded machine does not change a template's result; a worker that holds a template ten deadlines of
wall time without using the CPU (blocked) is killed too. A worker that dies is a classified result too.
Jobs go out largest template first, so that no big one is left to run alone at the end. With ``--tokenizer auto``
the worker picks the tokenizer (it parses the template anyway) and tells the parent before auditing, so that the
result of a worker killed mid-audit still names it.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from tito_audit.rendering import RenderLimits
from tito_audit.rendering.guard import AUDIT_LIMITS, address_space_bytes, keep_timer_handler, limit_process_memory
from tito_audit.report import scan_classes as classify
from tito_audit.report.scan_report import TemplateResult
from tito_audit.scan.discover import TemplateFile
from tito_audit.scan.pick import Picker
from tito_audit.scan.template_audit import SCAN_SEARCH, audit_auto, audit_template
from tito_audit.sources.synthesized import Synthesizer

AUTO = "auto"
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_WALL_BACKSTOP = 10  # deadlines of wall time after which a worker that uses no CPU (blocked) is killed anyway


@dataclass(frozen=True)
class Job:
    index: int
    template: TemplateFile
    tokenizer: str
    reason: str = ""


@dataclass(frozen=True)
class PoolLimits:
    workers: int = 2
    deadline_s: float = 60.0  # per template, the worker's CPU seconds, enforced by SIGKILL
    memory_bytes: int = 3 << 30  # address space a worker may add to what it inherited
    render: RenderLimits = AUDIT_LIMITS  # per render, and each template's budget (``rendering.budget``)
    scenarios: str = "quick"  # AuditOptions.scenarios: "quick" (the scan's default) or "full" (what `audit` plays)
    synthesize: bool = True  # with auto: a template no candidate matches gets a synthesized tokenizer (approximate)
    search: int = SCAN_SEARCH  # AuditOptions.search: conversations the counterexample search draws per template
    search_seed: int = 0


def _run_job(
    job: Job,
    models: dict[str, Any],
    limits: PoolLimits,
    pickers: dict[str, Picker],
    on_pick: Any,
    synthesizer: Synthesizer | None = None,
) -> Any:
    if job.tokenizer != AUTO:
        return audit_template(
            job.template,
            models[job.tokenizer],
            job.reason,
            limits.render,
            limits.scenarios,
            search=(limits.search, limits.search_seed),
        )
    if AUTO not in pickers:
        pickers[AUTO] = Picker(models)
    search = (limits.search, limits.search_seed)
    return audit_auto(job.template, pickers[AUTO], limits.render, on_pick, limits.scenarios, synthesizer, search)


def _worker_main(
    conn: Connection, models: dict[str, Any], limits: PoolLimits, synthesizer: Synthesizer | None = None
) -> None:
    """Messages to the parent: ("picked", tokenizer, reason) when auto picks, then ("done", index, result)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C and kills us
    # What the fork inherited (the tokenizers, the imports) lives as long as this worker: out of the garbage
    # collector's passes, which would otherwise walk it again at every full collection and, by writing to each
    # object's header, copy the pages the worker shares with the parent.
    gc.freeze()
    # An audit allocates containers by the hundred thousand (renders, encodings, offsets) that mostly die young.
    # Collecting every 700 of them (the default) walks the survivors of each render again and again, and collects
    # the old generation several times per hundred templates; every 5,000, the collector's time falls by about a
    # fifth (``gc.callbacks`` timings, 197 templates). Garbage cycles (jinja's macros make some) live a little longer.
    gc.set_threshold(5000, 10, 10)
    if limits.memory_bytes > 0:
        limit_process_memory(address_space_bytes() + limits.memory_bytes)
    keep_timer_handler()
    pickers: dict[str, Picker] = {}
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        result = _run_job(job, models, limits, pickers, lambda c: conn.send(("picked", c.name, c.reason)), synthesizer)
        conn.send(("done", job.index, result.to_dict()))


class _Slot:
    def __init__(self, ctx: Any, models: dict[str, Any], limits: PoolLimits, synthesizer: Any = None) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, models, limits, synthesizer), daemon=True)
        self.proc.start()
        child.close()
        self.job: Job | None = None
        self.since = 0.0
        self.cpu_since = 0.0

    def give(self, job: Job) -> None:
        self.job, self.since, self.cpu_since = job, time.monotonic(), self.cpu_seconds()
        self.conn.send(job)

    def cpu_seconds(self) -> float:
        """The worker's CPU time (user + system) from /proc; 0 where unreadable (the wall backstop remains)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        except (OSError, ValueError, IndexError):
            return 0.0

    def past_deadline(self, elapsed: float, deadline_s: float) -> bool:
        if elapsed <= deadline_s:
            return False
        return self.cpu_seconds() - self.cpu_since > deadline_s or elapsed > _WALL_BACKSTOP * deadline_s

    def kill(self) -> None:
        if self.proc.is_alive() and self.proc.pid is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(5)
        self.conn.close()


def _failed(job: Job, cls: str, kind: str, reason: str, seconds: float) -> TemplateResult:
    return TemplateResult(
        job.template.name,
        str(job.template.path),
        job.tokenizer,
        cls=cls,
        reason=reason,
        error_kind=kind,
        tokenizer_reason=job.reason,
        engine="pool",
        seconds=round(seconds, 4),
    )


def _size(job: Job) -> int:
    try:
        return job.template.path.stat().st_size
    except OSError:
        return 0


def run_jobs(
    jobs: Sequence[Job],
    models: dict[str, Any],
    limits: PoolLimits | None = None,
    on_result: Callable[[TemplateResult], None] | None = None,
    synthesizer: Synthesizer | None = None,
) -> list[TemplateResult]:
    """Results in job order. ``limits.workers == 0`` runs in this process (no kill, no address-space cap).
    ``synthesizer``: for auto jobs whose template no candidate matches (workers inherit it)."""
    limits = limits or PoolLimits()
    results: dict[int, TemplateResult] = {}

    def done(index: int, result: TemplateResult) -> None:
        results[index] = result
        if on_result is not None:
            on_result(result)

    if limits.workers <= 0:
        pickers: dict[str, Picker] = {}
        for job in jobs:
            done(job.index, _run_job(job, models, limits, pickers, None, synthesizer))
        return [results[j.index] for j in jobs]

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    ctx = mp.get_context("fork")
    pending = sorted(jobs, key=_size)  # popped from the end: the largest templates first, so none is left to run alone
    slots = [_Slot(ctx, models, limits, synthesizer) for _ in range(min(limits.workers, max(1, len(jobs))))]
    try:
        while pending or any(s.job for s in slots):
            for i, slot in enumerate(slots):
                if slot.job is None and pending:
                    try:
                        slot.give(pending[-1])
                        pending.pop()
                    except (BrokenPipeError, OSError):
                        slot.kill()
                        slots[i] = _Slot(ctx, models, limits, synthesizer)
            busy = [s for s in slots if s.job is not None]
            now = time.monotonic()
            timeout = max(0.05, min(s.since + limits.deadline_s - now for s in busy)) if busy else 0.05
            ready = wait([s.conn for s in busy] + [s.proc.sentinel for s in busy], timeout)
            for i, slot in enumerate(slots):
                current = slot.job
                if current is None:
                    continue
                elapsed = time.monotonic() - slot.since
                if slot.conn in ready:
                    try:
                        message = slot.conn.recv()
                        if message[0] == "picked":  # the job's tokenizer, for a result if the worker dies
                            slot.job = replace(current, tokenizer=message[1], reason=message[2])
                            continue
                        slot.job = None
                        done(message[1], TemplateResult(**message[2]))
                        continue
                    except (EOFError, OSError):
                        pass  # died mid-message: handled below
                if slot.conn in ready or slot.proc.sentinel in ready:
                    code = slot.proc.exitcode
                    slot.kill()
                    done(
                        current.index,
                        _failed(
                            current,
                            classify.WORKER_CRASH,
                            "worker_died",
                            f"worker process died (exit code {code})",
                            elapsed,
                        ),
                    )
                    slots[i] = _Slot(ctx, models, limits, synthesizer)
                elif slot.past_deadline(elapsed, limits.deadline_s):
                    slot.kill()
                    done(
                        current.index,
                        _failed(
                            current,
                            classify.LIMIT,
                            "hard_timeout",
                            f"killed after {limits.deadline_s:g}s of CPU time (per-template deadline)",
                            elapsed,
                        ),
                    )
                    slots[i] = _Slot(ctx, models, limits, synthesizer)
    finally:
        for slot in slots:
            try:
                if slot.job is None:
                    slot.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for slot in slots:
            slot.proc.join(2)
            slot.kill()
    return [results[j.index] for j in jobs]
