"""Audit one model (or many): run every check over one shared context and decide the verdict."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tito_audit import __version__
from tito_audit.checks import CheckResult, ordered_checks, run_check
from tito_audit.context import AuditContext, AuditOptions
from tito_audit.errors import AuditError, TemplateAlwaysRaises
from tito_audit.sources.load import LoadedModel, Provenance, load
from tito_audit.verdict import VERDICTS, decide

SCHEMA_VERSION = "1.0"


@dataclass
class ModelReport:
    model: str
    verdict: str
    provenance: Provenance | None = None
    checks: list[CheckResult] = field(default_factory=list)
    error: str | None = None
    error_kind: str | None = None
    seconds: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)
    scenarios: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None

    @property
    def verdict_explanation(self) -> str:
        return VERDICTS[self.verdict]

    def check(self, check_id: str) -> CheckResult:
        return next(c for c in self.checks if c.id == check_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "provenance": self.provenance.to_dict() if self.provenance else None,
            "verdict": self.verdict,
            "verdict_explanation": self.verdict_explanation,
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "models": [m.to_dict() for m in self.models],
        }


def _options_dict(options: AuditOptions) -> dict[str, Any]:
    return {
        "date": options.date.isoformat(),
        "template_kwargs": options.template_kwargs,
        "thinking": options.thinking,
    }


def audit_model(model: LoadedModel, options: AuditOptions | None = None) -> ModelReport:
    """All checks for one loaded model. Never raises for template problems: they become the report."""
    options = options or AuditOptions()
    started = time.perf_counter()
    ctx = AuditContext(model, options)
    report = ModelReport(model.name, "error", model.provenance, options=_options_dict(options))
    sims = ctx.simulations
    report.scenarios = {
        "played": sum(1 for s in sims if s.ok),
        "not_applicable": {s.scenario.id: s.error.message for s in sims if s.error is not None},
        "adapted": {s.scenario.id: list(s.adapters) for s in sims if s.adapters},
        "thinking_modes": ctx.thinking_modes,
        "stop_tokens": [model.tokenizer.convert_ids_to_tokens(i) for i in ctx.stop_ids],
    }
    if sims and all(not s.ok for s in sims):
        first = next(s.error for s in sims if s.error is not None)
        assert first is not None
        err: AuditError = TemplateAlwaysRaises(
            model.name, f"the template fails for every conversation ({first.kind}): {first.message}"
        )
        report.error, report.error_kind = (
            err.one_line(),
            ("template_" + first.kind if first.kind in ("security", "timeout", "too_large") else err.kind),
        )
        report.seconds = time.perf_counter() - started
        return report
    specs = ordered_checks()
    if options.only_checks:
        specs = [s for s in specs if s.id in options.only_checks or s.id in ("tool_append_prefix", "naive_rerender")]
    report.checks = [run_check(spec, ctx) for spec in specs]
    report.verdict = decide(report.checks)
    report.seconds = time.perf_counter() - started
    return report


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


def audit(
    specs: Iterable[str],
    options: AuditOptions | None = None,
    offline: bool = False,
    template_name: str | None = None,
    chat_template_file: str | None = None,
    on_model: Callable[[str, str], None] | None = None,
) -> AuditReport:
    """Load and audit each model; one model's failure never stops the others."""
    options = options or AuditOptions()
    reports: list[ModelReport] = []
    for spec in specs:
        try:
            if on_model:
                on_model(spec, "loading")
            model = load(spec, offline=offline, template_name=template_name, chat_template_file=chat_template_file)
            if on_model:
                on_model(spec, "auditing")
            reports.append(audit_model(model, options))
        except Exception as exc:
            if options.debug and not isinstance(exc, AuditError):
                raise
            reports.append(error_report(spec, exc, options.debug))
        if on_model:
            on_model(spec, "done")
    return AuditReport(reports)
