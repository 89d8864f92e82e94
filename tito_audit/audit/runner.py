"""Audit one model: build its context, run every check over it and decide the verdict."""

from __future__ import annotations

import time
from typing import Any

from tito_audit.audit.checks import ordered_checks, run_check
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.audit.coverage import Coverage
from tito_audit.audit.search import search_after_checks, steers
from tito_audit.errors import AuditError, LimitExceeded, TemplateAlwaysRaises, failed_every_conversation
from tito_audit.report.check_result import CheckResult
from tito_audit.report.model_report import ModelReport
from tito_audit.report.verdict import MIN_COVERAGE, decide
from tito_audit.rollout.stop import stop_convention
from tito_audit.sources.given import loaded_model
from tito_audit.sources.load import LoadedModel


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


def audit_model(model: LoadedModel | str, options: AuditOptions | None = None) -> ModelReport:
    """All checks for one loaded model, or a spec (a Hub id, a folder, a bundled name) loaded first as ``load``
    loads it (``sources.given``: what ``load`` refuses, a model not found or without a template, it raises; pass
    ``load(spec, offline=...)``'s model for its other options). Never raises for template problems: they become the
    report."""
    started = time.perf_counter()
    loaded: LoadedModel = loaded_model(model, "audit_model")
    return audit_context(AuditContext(loaded, options or AuditOptions()), started)


def audit_context(ctx: AuditContext, started: float | None = None) -> ModelReport:
    """``audit_model`` on a context that may already hold renders (the scan's smoke renders): same checks, same
    verdict rule."""
    started = time.perf_counter() if started is None else started
    report = ModelReport(ctx.model.name, "error", ctx.model.provenance, options=_options_dict(ctx.options))
    report.scenarios = _scenarios(ctx)
    if _stopped(ctx, report, started) or _refused_every_conversation(ctx, report, started):
        return report
    report.checks = _run_checks(ctx)
    _search(ctx, report)
    _record_renderers(report, ctx)
    if _stopped(ctx, report, started):
        return report
    report.decide()
    report.seconds = time.perf_counter() - started
    return report


def _scenarios(ctx: AuditContext) -> dict[str, Any]:
    """What was played (the scenarios, their adaptations and failures, the thinking modes, the stop reading) and
    what no scenario exercises (``not_probed``)."""
    sims, model = ctx.simulations, ctx.model
    played = sum(1 for s in sims if s.ok)
    scenarios: dict[str, Any] = {
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
        scenarios["not_probed"] = not_probed
    return scenarios


def _refused_every_conversation(ctx: AuditContext, report: ModelReport, started: float) -> bool:
    """Whether the template refused every scenario (not our failure): then the report is that error."""
    sims = ctx.simulations
    if not sims or any(s.error is None for s in sims):
        return False
    first = next(s.error for s in sims if s.error is not None)
    assert first is not None
    kind, cause = failed_every_conversation(first, None if ctx.engine.is_template else ctx.engine.name)
    err: AuditError = TemplateAlwaysRaises(ctx.model.name, cause)
    report.error, report.error_kind = err.one_line(), kind or err.kind
    _record_renderers(report, ctx)
    report.seconds = time.perf_counter() - started
    return True


def _search(ctx: AuditContext, report: ModelReport) -> None:
    """Template coverage and the counterexample search after the checks, where the verdict so far is ``safe`` or
    ``tito-required`` (``audit.coverage``, ``audit.search``): what the search found joins the scenarios and every
    check runs again; the arms no conversation took, and what the search could not draw, are named in
    ``not_probed``."""
    claims = decide(report.checks, report.scenarios).verdict in ("safe", "tito-required")
    measured = Coverage.of(ctx) if claims else None
    coverage = measured if isinstance(measured, Coverage) else None
    until_complete = not steers(ctx.options.search)  # a steered search counts every arm each render takes
    if coverage is not None:
        coverage.trace(until_complete)
    searched = search_after_checks(ctx, report.checks, report.scenarios, coverage)
    report.scenarios["search"] = searched.summary()
    if searched.found:
        ctx.add_simulations([p.simulation for p in searched.found])
        report.scenarios["played"] += len(searched.found)
        report.scenarios["catalogue"] += len(searched.found)
        report.checks = _run_checks(ctx)
    missed = searched.not_probed()
    if isinstance(measured, str):  # which template lines ran was not measured: named, never a clean SAFE
        missed.append(measured)
    if coverage is not None:
        coverage.trace(until_complete)  # what the search drew last, and the checks' renders of its counterexamples
        report.scenarios["coverage"] = coverage.summary()
        missed += coverage.not_probed()
    if missed:
        report.scenarios.setdefault("not_probed", []).extend(missed)


def _run_checks(ctx: AuditContext) -> list[CheckResult]:
    """Every registered check (those ``only_checks`` names and those the verdict needs), and the renderer pair's
    check when a trainer renderer is given."""
    specs = ordered_checks()
    if ctx.options.only_checks:  # filtering never changes the verdict: the checks it needs always run
        specs = [s for s in specs if s.id in ctx.options.only_checks or s.verdict_bearing]
    results = [run_check(spec, ctx) for spec in specs]
    if ctx.trainer is not None:
        from tito_audit.audit.checks.renderer_pair import PAIR

        results.append(run_check(PAIR, ctx))
    return results


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
