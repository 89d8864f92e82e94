"""What a check finds: ``Finding`` is one divergence (or one missing property) with the token windows on both
sides and its cause class (one of ``FINDING_CLASSES``); ``Outcome`` is what a check function returns.

How findings are built from an audit (at the first divergent token, counted so that a check that compared
nothing never passes) is ``tito_audit.audit.collector``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CONTEXT_TOKENS = 4  # ids shown on each side of a divergence
CLASS_WINDOW = 16  # ids from a divergence over which the two sides are aligned to find the runs that differ

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
    "numeric",  # replay --weights: engine and trainer log-probs differ on the same token in the same context
    "sampler",  # replay --weights: a sampler that is not pure biases the KL estimators
    "environment",  # replay: ids the environment wrote (a tool result) logged and trained as sampled
    "logprob_alignment",  # replay --weights: logged log-probs that belong to other positions than their tokens
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
    reason: str | None = (
        None  # short machine-readable cause for verdict_reasons ("drops_tool_calls"); None: the check id
    )

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
            "reason": self.reason,
        }


@dataclass
class Outcome:
    """What a check function returns: findings, or a reason it does not apply, plus a one-line summary.

    ``comparisons``: how many things the check compared (episodes, deltas, probes); a check that compared
    nothing cannot pass. ``render_failures``: renders that failed inside the check (counted, never skipped
    silently). ``tito_audit.report.findings.Collector`` keeps both counts.
    """

    findings: list[Finding] = field(default_factory=list)
    summary: str = ""
    not_applicable: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    comparisons: int = 0
    render_failures: int = 0
