"""The CI gate: which findings fail a run, after suppressions and a baseline.

Exit 1 means an active (unsuppressed) finding that is not in the baseline, from a check whose severity is at or
above ``--fail-on``. Suppressed and baseline findings stay in every report, marked, so the gate never hides
what it found. Configuration problems are ``UsageError`` lines (exit 2), raised before any model is audited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tito_audit.audit.checks import CheckResult, Finding
from tito_audit.gate.baseline import Baseline, apply_baseline, describe, finding_key, load_baseline
from tito_audit.gate.suppressions import (
    CONFIG_FILE,
    Suppression,
    apply_suppressions,
    load_suppressions,
    model_names,
    parse_suppressions,
    recompute,
)
from tito_audit.report.model_report import AuditReport, ModelReport

SEVERITY_RANK = {"warn": 1, "warning": 1, "error": 2}
MAX_NEW_LINES = 20


def gating_findings(report: AuditReport, fail_on: str) -> list[tuple[ModelReport, CheckResult, Finding]]:
    """Findings that make the run exit 1: active, not in the baseline, severity at or above ``fail_on``."""
    threshold = SEVERITY_RANK[fail_on]
    return [
        (m, c, f)
        for m in report.models
        for c in m.checks
        if SEVERITY_RANK[c.severity] >= threshold
        for f in c.active_findings
        if not f.baseline
    ]


@dataclass
class Gate:
    """Suppressions and baseline, loaded (and validated) before the audit runs."""

    suppressions: list[Suppression] = field(default_factory=list)
    source: str | None = None
    baseline: Baseline | None = None

    @classmethod
    def load(cls, suppressions_file: Path | None = None, baseline_file: Path | None = None) -> Gate:
        entries, source = load_suppressions(suppressions_file)
        return cls(entries, source, load_baseline(baseline_file) if baseline_file is not None else None)

    def apply(self, report: AuditReport, fail_on: str) -> list[str]:
        """Mark the report; return the lines for stderr (unused suppressions, new gating findings)."""
        lines = apply_suppressions(report, self.suppressions, self.source)
        if self.baseline is None:
            return lines
        apply_baseline(report, self.baseline)
        new = gating_findings(report, fail_on)
        for m, _, f in new[:MAX_NEW_LINES]:
            lines.append(
                f"new finding (not in baseline {self.baseline.path}): {describe(finding_key(m, f))}: {f.message}"
            )
        if len(new) > MAX_NEW_LINES:
            lines.append(f"... and {len(new) - MAX_NEW_LINES} more new finding(s)")
        return lines


__all__ = [
    "CONFIG_FILE",
    "SEVERITY_RANK",
    "Baseline",
    "Gate",
    "Suppression",
    "apply_baseline",
    "apply_suppressions",
    "describe",
    "finding_key",
    "gating_findings",
    "load_baseline",
    "load_suppressions",
    "model_names",
    "parse_suppressions",
    "recompute",
]
