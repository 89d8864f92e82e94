"""Audit many models: each loaded and audited once, in worker processes, reports in input order; one model's
failure never costs the others, and Ctrl-C keeps the models that finished."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from tito_audit.audit.context import AuditOptions
from tito_audit.audit.runner import audit_model
from tito_audit.errors import AuditError
from tito_audit.report.model_report import AuditReport, ModelReport, error_report
from tito_audit.sources.given import model_specs
from tito_audit.sources.load import load
from tito_audit.sources.synthesized import on_its_control_tokens
from tito_audit.workers import Died, Done, Killed, Raised, WorkerPool, default_jobs, interrupt, reraise

__all__ = ["AuditInterrupted", "audit_models", "default_jobs"]


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
    specs: Iterable[str] | str,
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
    specs = model_specs(specs, "audit_models")  # one spec is one model, not the letters of its name
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
    interrupt.check()  # a Ctrl-C swallowed in a destructor stops the run before the next model
    if on_model:
        on_model(spec, "auditing")
    report = _load_and_audit(spec, *args)
    if on_model:
        on_model(spec, "done")
    return report


def _parallel(
    specs: list[str],
    args: tuple[Any, ...],
    on_model: Callable[[str, str], None] | None,
    jobs: int,
    reports: dict[int, ModelReport],
) -> None:
    """Fill ``reports`` (index in ``specs`` -> report) as models finish: on Ctrl-C it holds those that did. A
    worker that dies costs only the model it held (``workers``), reported as an internal error."""
    with WorkerPool(min(jobs, len(specs))) as pool:  # no idle worker forked for nothing
        for i, spec in enumerate(specs):
            pool.submit(i, _load_and_audit, spec, *args)
        if on_model:
            for spec in specs:
                on_model(spec, "auditing")
        for event in pool:
            i = event.key
            if isinstance(event, Raised):  # with --debug, an internal error (the worker's traceback chained)
                reraise(event)
            if isinstance(event, Done):
                reports[i] = event.value
            elif isinstance(event, Died | Killed):
                reports[i] = ModelReport(
                    specs[i],
                    "error",
                    error=f"{specs[i]}: internal error: the worker process auditing it died",
                    error_kind="internal",
                )
            else:
                continue
            if on_model:
                on_model(specs[i], "done")
