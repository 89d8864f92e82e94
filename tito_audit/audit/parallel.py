"""Audit many models: each loaded and audited once, in worker processes, reports in input order; one model's
failure never costs the others, and Ctrl-C keeps the models that finished."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from tito_audit.audit.context import AuditOptions
from tito_audit.audit.runner import audit_model
from tito_audit.errors import AuditError
from tito_audit.report.model_report import AuditReport, ModelReport, error_report
from tito_audit.sources.load import load
from tito_audit.sources.synthesized import on_its_control_tokens


def default_jobs(models: int) -> int:
    """One worker per model, at most one per usable core."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(models, cores))


def _load_and_audit(
    spec: str, options: AuditOptions, offline: bool, template_name: str | None, chat_template_file: str | None
) -> ModelReport:
    """One model, loaded once and audited; an AuditError (any error, unless debugging) becomes its report."""
    try:
        model = load(spec, offline=offline, template_name=template_name, chat_template_file=chat_template_file)
        if chat_template_file is not None:  # a template not the tokenizer's own: on its own control tokens
            model = on_its_control_tokens(model, options.limits)
        return audit_model(model, options)
    except Exception as exc:
        if options.debug and not isinstance(exc, AuditError):
            raise
        return error_report(spec, exc, options.debug)


def audit_models(
    specs: Iterable[str],
    options: AuditOptions | None = None,
    offline: bool = False,
    template_name: str | None = None,
    chat_template_file: str | None = None,
    on_model: Callable[[str, str], None] | None = None,
    jobs: int | None = None,
) -> AuditReport:
    """Load and audit each model, in parallel worker processes (``jobs``; default ``default_jobs``); reports in
    input order. One model's failure never stops the others. With ``options.debug`` an internal error is raised
    (from a worker, with its traceback chained)."""
    options = options or AuditOptions()
    specs = list(specs)
    jobs = default_jobs(len(specs)) if jobs is None else max(1, jobs)
    args = (options, offline, template_name, chat_template_file)
    done: dict[int, ModelReport] = {}
    try:
        if jobs == 1 or len(specs) <= 1:
            for i, spec in enumerate(specs):
                done[i] = _sequential(spec, args, on_model)
        else:
            _parallel(specs, args, on_model, jobs, done)
    except KeyboardInterrupt:
        finished = AuditReport([done[i] for i in sorted(done)], requested=len(specs))
        raise AuditInterrupted(finished) from None
    return AuditReport([done[i] for i in range(len(specs))])


class AuditInterrupted(Exception):
    """Ctrl-C during ``audit``: ``report`` holds the models that finished, in input order (``complete`` False)."""

    def __init__(self, report: AuditReport) -> None:
        super().__init__(f"interrupted after {len(report.models)} of {report.requested} models")
        self.report = report


def _sequential(spec: str, args: tuple[Any, ...], on_model: Callable[[str, str], None] | None) -> ModelReport:
    if on_model:
        on_model(spec, "auditing")
    report = _load_and_audit(spec, *args)
    if on_model:
        on_model(spec, "done")
    return report


def _pool(jobs: int) -> ProcessPoolExecutor:
    """Worker processes forked from this one (nothing to re-import), or spawned where fork does not exist. Workers
    ignore Ctrl-C: the terminal sends it to the whole process group, and this process ends them itself
    (``_stop_workers``), at once and without a traceback from each."""
    methods = mp.get_all_start_methods()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the Rust pool must not be live across a fork
    context = mp.get_context("fork" if "fork" in methods else "spawn")
    return ProcessPoolExecutor(jobs, mp_context=context, initializer=_ignore_interrupts)


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End a pool's workers now (Ctrl-C): a worker holds a model for seconds, and ``shutdown`` would wait for it.
    concurrent.futures has no public call for it before Python 3.14 (``terminate_workers``)."""
    terminate = getattr(pool, "terminate_workers", None)
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def _parallel(
    specs: list[str],
    args: tuple[Any, ...],
    on_model: Callable[[str, str], None] | None,
    jobs: int,
    reports: dict[int, ModelReport],
) -> None:
    """Fill ``reports`` (index in ``specs`` -> report) as models finish: on Ctrl-C it holds those that did."""
    lost: list[int] = []  # models whose worker died (with the others' work on that pool)
    with _pool(jobs) as pool:
        futures = {pool.submit(_load_and_audit, spec, *args): i for i, spec in enumerate(specs)}
        if on_model:
            for spec in specs:
                on_model(spec, "auditing")
        try:
            for future in as_completed(futures):
                i = futures[future]
                try:
                    reports[i] = future.result()
                except BrokenProcessPool:
                    lost.append(i)
                    continue
                if on_model:
                    on_model(specs[i], "done")
        except BaseException:
            _stop_workers(pool)
            raise
    for i in sorted(lost):  # again, each alone, so that only the model that kills its worker is lost
        with _pool(1) as alone:
            try:
                reports[i] = alone.submit(_load_and_audit, specs[i], *args).result()
            except KeyboardInterrupt:
                _stop_workers(alone)
                raise
            except BrokenProcessPool:
                reports[i] = ModelReport(
                    specs[i],
                    "error",
                    error=f"{specs[i]}: internal error: the worker process auditing it died",
                    error_kind="internal",
                )
        if on_model:
            on_model(specs[i], "done")
