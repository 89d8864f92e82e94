"""The audit's report: one ``ModelReport`` per model (verdict, reasons, checks, provenance) inside an
``AuditReport`` (the run: schema and library versions, suppressions, baseline, completeness).

These are data, in the report layer: the audit fills them (``tito_audit.audit``), the gate edits them
(``tito_audit.gate``) and every format renders them (``tito_audit.formats``), none of which has to import the
others for it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

from tito_audit._version import __version__
from tito_audit.errors import AuditError
from tito_audit.report.check_result import CheckResult
from tito_audit.report.verdict import (
    APPEND_REWRITE,
    DROPS_PREFIXES,
    TITO_REQUIRED_ON_TOOL_APPENDS,
    UNSAFE_BECAUSE,
    VERDICTS,
    Verdict,
    decide,
)
from tito_audit.sources.load import Provenance

# 1.1: top-level suppressions/baseline keys, finding.baseline (tito_audit.gate)
# 1.2: verdict_reasons; scenarios.catalogue/adaptations/low_coverage; check comparisons/render_failures/verdict_role;
#      finding.reason; provenance.tokenizer (real or synthesized), tokenizer_base, synthesized_tokens
# 1.3: model renderers (engine and trainer: library, native output, the offline line), options.renderer and
#      options.train_renderer, the renderer_pair check (tito_audit.audit.checks.renderer_pair); top-level libraries and
#      provenance.libraries (tito-audit, transformers, tokenizers, jinja2, compat_fallbacks); complete (False when
#      the run was interrupted)
#      replay reports: the models[].replay totals documented, with engine-prompt, drift and fit counts
#      scenarios.stop_convention; adaptations named_call_ids, tools_described, tools_flat, tools_parameter_definitions
#      scenarios.not_probed, scenarios.internal_errors; verdict_reasons not_probed:WHAT, error:CHECK:undecided,
#      tito-required:suppressed:CHECK; check continuation; tool_call_serialization data drift_rate and friends
# 1.4: scenarios.search (the counterexample search: budget, seed, what it drew, its counterexamples with their
#      messages) and scenarios.coverage (the template's arms history reaches, how many ran, which did not);
#      not_probed reasons template_line:N: TEST, template_lines:+K, switch:NAME[=VALUE], search:DRAWN/BUDGET,
#      search:failed, coverage:renderer|not_compiled|not_instrumented|no_message_loop, scenario:ID (a derived
#      scenario the template refused: wide/N, parallel/N, long/N...), width:N and parallel:N (counts past what the
#      derived wide and parallel episodes play); scenarios switch/NAME=VALUE, search/N,
#      search/replayed-N; libraries.hypothesis
#      replay: finding classes environment (replay: environment ids logged and trained as sampled) and logprob_alignment
#      (replay --weights: the check replay_logprob_alignment, models[].replay.weights.alignment); replay totals
#      by_class count a turn in every class it holds, multi_class_turns
SCHEMA_VERSION = "1.4"


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
        """The verdict in words; ``unsafe`` says which of its causes holds (drops tool traffic, breaks buffer +
        delta, or both), read from its reasons; ``tito-required`` says buffer + delta is exact on tool appends only
        where a user or system append rewrites the history (a suppression accepts it, the template still does)."""
        appends = (f"tito-required:{APPEND_REWRITE}", f"tito-required:suppressed:{APPEND_REWRITE}")
        if self.verdict == "tito-required" and any(r in self.verdict_reasons for r in appends):
            return TITO_REQUIRED_ON_TOOL_APPENDS
        if self.verdict != "unsafe":
            return VERDICTS[self.verdict]
        causes = [r.partition(":")[2] for r in self.verdict_reasons if r.startswith("unsafe:")]
        drops = any(c.startswith(DROPS_PREFIXES) for c in causes)
        breaks = any(not c.startswith(DROPS_PREFIXES) for c in causes)
        if drops or breaks:
            return UNSAFE_BECAUSE["both" if drops and breaks else "drops" if drops else "breaks"]
        return VERDICTS["unsafe"]

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
    # A run interrupted inside its one model (replay: part of the log read): what it holds, in words.
    interrupted: str | None = None

    @property
    def complete(self) -> bool:
        return self.interrupted is None and (self.requested is None or len(self.models) >= self.requested)

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
