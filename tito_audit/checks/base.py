"""What a check is, what it finds, and the registry that makes adding one a one-file change.

A check is a function over an ``AuditContext`` decorated with ``@check(...)``, which records its stable id,
severity, explanation and fix hint. Every module in this package is imported by ``checks/__init__.py``, so a
new check is a new module and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from tito_audit.context import AuditContext

Severity = Literal["error", "warning"]
Status = Literal["pass", "warn", "fail", "not_applicable", "error"]

# Why a token diverged; every finding has exactly one.
FINDING_CLASSES = (
    "history_rewrite",
    "generation_prompt",
    "stop_seam",
    "whitespace",
    "serialization",
    "non_canonical",
    "special_token",
    "date",
    "template",
)


@dataclass
class TokenSide:
    """A window of ids around a divergence, with each id's decoded text."""

    ids: list[int]
    tokens: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"ids": self.ids, "tokens": self.tokens}


@dataclass
class Finding:
    check: str
    scenario: str
    cls: str
    message: str
    index: int | None = None  # first divergent token (in the buffered / expected sequence)
    context_start: int | None = None  # index of the first id shown in ``expected`` / ``actual``
    expected: TokenSide | None = None  # buffered / sampled side
    actual: TokenSide | None = None  # re-rendered / re-encoded side
    affected_trainable: int = 0
    rate: float | None = None
    suppressed: bool = False
    suppression_reason: str | None = None
    baseline: bool = False  # already in the --baseline report: kept active, ignored by the exit code

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "scenario": self.scenario,
            "class": self.cls,
            "message": self.message,
            "index": self.index,
            "context_start": self.context_start,
            "expected": self.expected.to_dict() if self.expected else None,
            "actual": self.actual.to_dict() if self.actual else None,
            "affected_trainable": self.affected_trainable,
            "rate": self.rate,
            "suppressed": self.suppressed,
            "suppression_reason": self.suppression_reason,
            "baseline": self.baseline,
        }


@dataclass
class Outcome:
    """What a check function returns: findings, or a reason it does not apply, plus a one-line summary."""

    findings: list[Finding] = field(default_factory=list)
    summary: str = ""
    not_applicable: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    severity: Severity
    explanation: str
    fix_hint: str
    run: Callable[[AuditContext], Outcome]
    order: int = 100


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
        }


REGISTRY: dict[str, CheckSpec] = {}


def check(
    id: str, title: str, severity: Severity, explanation: str, fix_hint: str, order: int = 100
) -> Callable[[Callable[[AuditContext], Outcome]], Callable[[AuditContext], Outcome]]:
    def register(fn: Callable[[AuditContext], Outcome]) -> Callable[[AuditContext], Outcome]:
        if id in REGISTRY:
            raise ValueError(f"duplicate check id {id!r}")
        REGISTRY[id] = CheckSpec(
            id, title, severity, " ".join(explanation.split()), " ".join(fix_hint.split()), fn, order
        )
        return fn

    return register


def status_for(spec: CheckSpec, findings: list[Finding]) -> Status:
    active = [f for f in findings if not f.suppressed]
    if not active:
        return "pass"
    return "fail" if spec.severity == "error" else "warn"


def run_check(spec: CheckSpec, ctx: AuditContext) -> CheckResult:
    from tito_audit.rendering.renderer import RenderError

    try:
        outcome = spec.run(ctx)
    except RenderError as exc:
        return CheckResult(
            spec.id,
            spec.title,
            "error",
            spec.severity,
            f"render failed: {exc.message}",
            spec.explanation,
            spec.fix_hint,
        )
    except Exception as exc:  # a check bug must not lose the other checks' results
        if ctx.options.debug:
            raise
        return CheckResult(
            spec.id,
            spec.title,
            "error",
            spec.severity,
            f"{type(exc).__name__}: {exc}",
            spec.explanation,
            spec.fix_hint,
        )
    if outcome.not_applicable is not None:
        return CheckResult(
            spec.id,
            spec.title,
            "not_applicable",
            spec.severity,
            outcome.not_applicable,
            spec.explanation,
            spec.fix_hint,
            data=outcome.data,
        )
    status = status_for(spec, outcome.findings)
    summary = outcome.summary or ("no divergence" if status == "pass" else f"{len(outcome.findings)} finding(s)")
    return CheckResult(
        spec.id,
        spec.title,
        status,
        spec.severity,
        summary,
        spec.explanation,
        spec.fix_hint,
        outcome.findings,
        outcome.data,
    )
