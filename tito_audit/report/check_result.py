"""What one check concluded (``CheckResult``): the unit every report, format and the verdict rule read.

It lives in the report layer, below the checks that produce it, so that the formats, the gate and the verdict
rule read results without importing the audit. The check's declaration (``CheckSpec``, ``@check``) and how it is
run live with the checks (``tito_audit.audit.checks.base``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from tito_audit.report.findings import Finding

Severity = Literal["error", "warning"]
Status = Literal["pass", "warn", "fail", "not_applicable", "error"]
# What a check's findings do to the verdict (tito_audit.report.verdict): "unsafe" / "tito-required" make it at least
# that (such a check is verdict-bearing: the verdict cannot be decided without it); "caveat" findings put an
# ``avoid:`` warning on the verdict line without changing it; None: the check informs, it does not decide.
VerdictRole = Literal["unsafe", "tito-required", "caveat"]


@dataclass
class CheckResult:
    id: str
    title: str
    status: Status
    severity: Severity
    summary: str
    explanation: str
    fix_hint: str
    findings: list[Finding] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    comparisons: int = 0
    render_failures: int = 0
    verdict_role: VerdictRole | None = None

    @property
    def active_findings(self) -> list[Finding]:
        return [f for f in self.findings if not f.suppressed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "status": self.status,
            "severity": self.severity,
            "summary": self.summary,
            "explanation": self.explanation,
            "fix_hint": self.fix_hint,
            "findings": [f.to_dict() for f in self.findings],
            "data": self.data,
            "comparisons": self.comparisons,
            "render_failures": self.render_failures,
            "verdict_role": self.verdict_role,
        }
