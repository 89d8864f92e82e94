"""The scan's jobs in worker processes with hard limits: a runaway template costs one worker, never the scan.

The workers are ``tito_audit.workers.WorkerPool``'s, forked after the tokenizers are loaded, so they share them
copy-on-write and start in milliseconds. Each worker caps its own address space (``RLIMIT_AS``), every render
inside it is bounded by ``RenderLimits``, and the pool ends a worker that spends more than ``deadline_s`` of CPU
time on one template (a render stuck in C code that no signal interrupts) and starts a fresh one. CPU time, as
for the render limit, so that a loaded machine does not change a template's result; a worker that holds a
template ten deadlines of wall time without using the CPU (blocked) is ended too. A worker that dies is a
classified result too.
Jobs go out largest template first, so that no big one is left to run alone at the end. With ``--tokenizer auto``
the worker picks the tokenizer (it parses the template anyway) and tells the parent before auditing, so that the
result of a worker killed mid-audit still names it.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tito_audit.rendering import RenderLimits
from tito_audit.rendering.guard import AUDIT_LIMITS, address_space_bytes, keep_timer_handler, limit_process_memory
from tito_audit.report import scan_classes as classify
from tito_audit.report.scan_report import TemplateResult
from tito_audit.scan.discover import TemplateFile
from tito_audit.scan.pick import Picker
from tito_audit.scan.template_audit import SCAN_SEARCH, audit_auto, audit_template
from tito_audit.sources.synthesized import Synthesizer
from tito_audit.workers import Died, Done, Ended, Killed, Told, WorkerPool, interrupt, tell

AUTO = "auto"


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


_WORKER: dict[str, Any] = {}  # in a worker: what it was forked with, and its picker


def _worker_setup(models: dict[str, Any], limits: PoolLimits, synthesizer: Synthesizer | None) -> None:
    """Once per worker, before its first template."""
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
    _WORKER.update(models=models, limits=limits, synthesizer=synthesizer, pickers={})


def _worker_job(job: Job) -> dict[str, Any]:
    """One template in a worker; with auto, the tokenizer it picks is told to the parent before the audit."""
    result = _run_job(
        job,
        _WORKER["models"],
        _WORKER["limits"],
        _WORKER["pickers"],
        lambda c: tell((c.name, c.reason)),
        _WORKER["synthesizer"],
    )
    return result.to_dict()


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


def _result(job: Job, event: Ended) -> TemplateResult:
    """A template's result from the event that ended its job."""
    if isinstance(event, Done):
        return TemplateResult(**event.value)
    if isinstance(event, Killed):
        reason = f"killed after {event.deadline_s:g}s of CPU time (per-template deadline)"
        return _failed(job, classify.LIMIT, "hard_timeout", reason, event.seconds)
    if isinstance(event, Died):
        reason = f"worker process died (exit code {event.exitcode})"
    else:
        reason = f"worker process failed: {type(event.error).__name__}: {event.error}".split("\n")[0]
    return _failed(job, classify.WORKER_CRASH, "worker_died", reason, event.seconds)


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
        interrupt.check()  # a Ctrl-C swallowed in a destructor stops the scan here, this result kept

    try:
        if limits.workers <= 0:
            pickers: dict[str, Picker] = {}
            for job in jobs:
                done(job.index, _run_job(job, models, limits, pickers, None, synthesizer))
        else:
            _in_workers(jobs, models, limits, synthesizer, done)
    except KeyboardInterrupt:
        raise JobsInterrupted([results[j.index] for j in jobs if j.index in results]) from None
    return [results[j.index] for j in jobs]


class JobsInterrupted(Exception):
    """Ctrl-C during a scan: ``results`` holds the templates that finished, in job order; the workers are ended."""

    def __init__(self, results: list[TemplateResult]) -> None:
        super().__init__(f"interrupted after {len(results)} templates")
        self.results = results


def _in_workers(
    jobs: Sequence[Job],
    models: dict[str, Any],
    limits: PoolLimits,
    synthesizer: Synthesizer | None,
    done: Callable[[int, TemplateResult], None],
) -> None:
    held = {job.index: job for job in jobs}  # each job as the parent knows it (with auto: once picked, its tokenizer)
    workers = min(limits.workers, max(1, len(jobs)))
    with WorkerPool(workers, _worker_setup, (models, limits, synthesizer), deadline_s=limits.deadline_s) as pool:
        for job in reversed(sorted(jobs, key=_size)):  # the largest first, so that none is left to run alone
            pool.submit(job.index, _worker_job, job)
        for event in pool:
            job = held[event.key]
            if isinstance(event, Told):  # the job's tokenizer, for a result if the worker dies
                held[event.key] = replace(job, tokenizer=event.message[0], reason=event.message[1])
            else:
                done(job.index, _result(job, event))
