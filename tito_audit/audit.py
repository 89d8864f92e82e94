"""Audit one model (or many): run every check over one shared context and decide the verdict."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from tito_audit._version import __version__
from tito_audit.checks import CheckResult, ordered_checks, run_check
from tito_audit.context import AuditContext, AuditOptions
from tito_audit.errors import AuditError, LimitExceeded, TemplateAlwaysRaises, failed_every_conversation
from tito_audit.rollout.stop import stop_convention
from tito_audit.sources.load import LoadedModel, Provenance, load
from tito_audit.sources.synthesized import on_its_control_tokens
from tito_audit.verdict import MIN_COVERAGE, VERDICTS, Verdict, decide

# 1.1: top-level suppressions/baseline keys, finding.baseline (tito_audit.gate)
# 1.2: verdict_reasons; scenarios.catalogue/adaptations/low_coverage; check comparisons/render_failures/verdict_role;
#      finding.reason; provenance.tokenizer (real or synthesized), tokenizer_base, synthesized_tokens
# 1.3: model renderers (engine and trainer: library, native output, the offline line), options.renderer and
#      options.train_renderer, the renderer_pair check (tito_audit.engines.pair); top-level libraries and
#      provenance.libraries (tito-audit, transformers, tokenizers, jinja2, compat_fallbacks); complete (False when
#      the run was interrupted)
#      replay reports: the models[].replay totals documented, with engine-prompt, drift and fit counts
#      scenarios.stop_convention; adaptations named_call_ids, tools_described, tools_flat, tools_parameter_definitions
#      scenarios.not_probed, scenarios.internal_errors; verdict_reasons not_probed:WHAT, error:CHECK:undecided,
#      tito-required:suppressed:CHECK; check continuation; tool_call_serialization data drift_rate and friends
SCHEMA_VERSION = "1.3"


@dataclass
class ModelReport:
    model: str
    verdict: Verdict
    provenance: Provenance | None = None
    checks: list[CheckResult] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    seconds: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)
    scenarios: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None
    verdict_reasons: list[str] = field(default_factory=list)
    # What rendered (tito_audit.engines): {"engine": ..., "trainer": ...}; None for the model's template alone
    renderers: dict[str, Any] | None = None

    @property
    def verdict_explanation(self) -> str:
        return VERDICTS[self.verdict]

    def decide(self) -> None:
        """Verdict and reasons from the checks as they stand (after suppressions) and the coverage."""
        if self.error is not None or not self.checks:
            return
        decision = decide(self.checks, self.scenarios)
        self.verdict, self.verdict_reasons = decision.verdict, decision.reasons

    def check(self, check_id: str) -> CheckResult:
        return next(c for c in self.checks if c.id == check_id)

    def to_dict(self) -> dict[str, Any]:
        out = self._fields()
        if self.renderers is not None:  # only where a renderer other than the template alone was named
            out["renderers"] = self.renderers
        return out

    def _fields(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "provenance": self.provenance.to_dict() if self.provenance else None,
            "verdict": self.verdict,
            "verdict_explanation": self.verdict_explanation,
            "verdict_reasons": self.verdict_reasons,
            "error": self.error,
            "error_kind": self.error_kind,
            "options": self.options,
            "scenarios": self.scenarios,
            "seconds": round(self.seconds, 3),
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass
class AuditReport:
    models: list[ModelReport]
    # Filled by tito_audit.gate: suppression entries used/unused in this run, and baseline counts.
    suppressions: dict[str, Any] = field(default_factory=lambda: {"source": None, "used": [], "unused": []})
    baseline: dict[str, Any] | None = None
    # Models asked for; more than ``len(models)`` when the run was interrupted (Ctrl-C) before they finished.
    requested: int | None = None

    @property
    def complete(self) -> bool:
        return self.requested is None or len(self.models) >= self.requested

    @property
    def libraries(self) -> dict[str, Any]:
        """The library versions and compat fallbacks the audits ran with: a loaded model's (its worker process
        probed them), else this process's (``compat.library_versions``, which imports transformers to probe)."""
        for m in self.models:
            if m.provenance is not None and m.provenance.libraries:
                return dict(m.provenance.libraries)
        from tito_audit.compat import library_versions

        return dict(library_versions())

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "libraries": self.libraries,
            "complete": self.complete,
            "models": [m.to_dict() for m in self.models],
            "suppressions": self.suppressions,
            "baseline": self.baseline,
        }


def _options_dict(options: AuditOptions) -> dict[str, Any]:
    out = {
        "date": options.date.isoformat(),
        "template_kwargs": options.template_kwargs,
        "thinking": options.thinking,
    }
    if options.scenarios != "full":  # only a reduced set is worth a key: the default report stays as it was
        out["scenarios"] = options.scenarios
    if options.renderer is not None:
        out["renderer"] = options.renderer
    if options.train_renderer is not None:
        out["train_renderer"] = options.train_renderer
    return out


def audit_model(model: LoadedModel, options: AuditOptions | None = None) -> ModelReport:
    """All checks for one loaded model. Never raises for template problems: they become the report."""
    started = time.perf_counter()
    return audit_context(AuditContext(model, options or AuditOptions()), started)


def audit_context(ctx: AuditContext, started: float | None = None) -> ModelReport:
    """``audit_model`` on a context that may already hold renders (the scan's smoke renders): same checks, same
    verdict rule."""
    started = time.perf_counter() if started is None else started
    model, options = ctx.model, ctx.options
    report = ModelReport(model.name, "error", model.provenance, options=_options_dict(options))
    sims = ctx.simulations
    played = sum(1 for s in sims if s.ok)
    report.scenarios = {
        "played": played,
        "catalogue": len(sims),
        "low_coverage": played < MIN_COVERAGE,
        "adaptations": sorted({a for s in sims if s.ok for a in s.adapters}),
        "not_applicable": {s.scenario.id: s.error.message for s in sims if s.error is not None},
        "internal_errors": {s.scenario.id: s.internal.message for s in sims if s.internal is not None},
        "adapted": {s.scenario.id: list(s.adapters) for s in sims if s.adapters},
        "thinking_modes": ctx.thinking_modes,
        "stop_tokens": [model.tokenizer.convert_ids_to_tokens(i) for i in ctx.stop_ids],
        "stop_convention": stop_convention(ctx.renderer, model.generation_eos_ids),
    }
    not_probed = [*ctx.shapes.reasoning.not_probed, *ctx.not_probed]
    if not_probed:
        report.scenarios["not_probed"] = not_probed
    if _stopped(ctx, report, started):
        return report
    if sims and all(s.error is not None for s in sims):  # the template refused every one (not our failure)
        first = next(s.error for s in sims if s.error is not None)
        assert first is not None
        kind, cause = failed_every_conversation(first, None if ctx.engine.is_template else ctx.engine.name)
        err: AuditError = TemplateAlwaysRaises(model.name, cause)
        report.error, report.error_kind = err.one_line(), kind or err.kind
        _record_renderers(report, ctx)
        report.seconds = time.perf_counter() - started
        return report
    specs = ordered_checks()
    if options.only_checks:  # filtering never changes the verdict: the checks it needs always run
        specs = [s for s in specs if s.id in options.only_checks or s.verdict_bearing]
    report.checks = [run_check(spec, ctx) for spec in specs]
    if ctx.trainer is not None:
        from tito_audit.engines.pair import PAIR

        report.checks.append(run_check(PAIR, ctx))
    _record_renderers(report, ctx)
    if _stopped(ctx, report, started):
        return report
    report.decide()
    report.seconds = time.perf_counter() - started
    return report


def _record_renderers(report: ModelReport, ctx: AuditContext) -> None:
    """What rendered, recorded once every render is done: how a renderer really rendered (a Python encoder may
    return text or ids), and the options it was not given."""
    if ctx.engine.is_template and ctx.trainer is None:
        return
    trainer = None
    if ctx.trainer is not None and ctx.trainer_renderer is not None:
        trainer = ctx.renderer_report(ctx.trainer, ctx.trainer_renderer)
    report.renderers = {"engine": ctx.renderer_report(ctx.engine, ctx.renderer), "trainer": trainer}


def _stopped(ctx: AuditContext, report: ModelReport, started: float) -> bool:
    """Whether the template spent its per-template budget (``rendering.budget``): then it is classified
    ``limit_exceeded`` (an error, exit 2 for this model), whatever its renders so far would have decided."""
    renderers = (ctx.renderer, getattr(ctx, "trainer_renderer", None))
    stopped = next((r.budget.stopped for r in renderers if r is not None and r.budget.stopped), None)
    if stopped is None:
        return False
    err = LimitExceeded(ctx.model.name, f"the template was stopped: {stopped} (per-template budget)")
    report.error, report.error_kind = err.one_line(), err.kind
    report.seconds = time.perf_counter() - started
    return True


def error_report(spec: str, exc: BaseException, debug: bool = False) -> ModelReport:
    if isinstance(exc, AuditError):
        return ModelReport(
            spec,
            "error",
            error=exc.one_line(),
            error_kind=exc.kind,
            traceback=traceback.format_exc() if debug else None,
        )
    return ModelReport(
        spec,
        "error",
        error=f"{spec}: internal error: {type(exc).__name__}: {exc}",
        error_kind="internal",
        traceback=traceback.format_exc(),
    )


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


def audit(
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
