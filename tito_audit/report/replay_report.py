"""The report of a replayed log: a ``ModelReport`` whose verdict speaks about the loop in the log (its rule:
``tito_audit.report.loop_verdict``), with the replay's totals in its JSON (``models[].replay``).

Every format, suppression and baseline of the audit applies to it unchanged; the gate's recompute of the verdict
calls ``decide``, which applies the loop's rule.
"""

from __future__ import annotations

from typing import Any

from tito_audit.report.loop_verdict import (
    INCOMPLETE,
    LOOP_VERDICTS,
    MALFORMED,
    MISALIGNED,
    NAIVE_NOTHING,
    NAIVE_PROVEN,
    NO_LOSS_MASK,
    NO_TRAINER,
    STOPS_NEVER_TRAINED,
    TURNS_ONLY,
    UNCHECKED,
    decide_loop,
)
from tito_audit.report.model_report import ModelReport


class ReplayModelReport(ModelReport):
    """A model report whose verdict speaks about the loop in the log, with the replay totals in JSON."""

    replay: dict[str, Any]

    @property
    def verdict_explanation(self) -> str:
        base = LOOP_VERDICTS[self.verdict]
        reasons = self.verdict_reasons
        unsafe = [r for r in reasons if r.startswith("unsafe:")]
        if unsafe == ["unsafe:replay_logprob_alignment"]:
            base = MISALIGNED
        if self.verdict == "tito-required":
            base = f"{self._loop(reasons)}; {self._naive(reasons)}"
        unchecked = [self._unchecked(r) for r in reasons if r in UNCHECKED]
        return base + (f" ({'; '.join(unchecked)})" if unchecked else "")

    @staticmethod
    def _loop(reasons: list[str]) -> str:
        """What a ``tito-required`` verdict says about the loop itself."""
        if any(r.startswith("tito-required:suppressed:") for r in reasons):
            return "the loop diverges where findings are suppressed (accepted, not fixed)"
        if NO_TRAINER in reasons:
            return (
                "the trainer side was not logged: each engine prompt holds the earlier samples as sampled, what was "
                "trained was not checked"
            )
        if NO_LOSS_MASK in reasons or TURNS_ONLY in reasons:
            return "every sampled turn sits in the trained sequence as sampled"
        if STOPS_NEVER_TRAINED in reasons:  # the ids are trained as logged; the logged turns may lack their stop
            return "every logged turn is trained as logged, and the turns look cut before their stop token"
        if INCOMPLETE in reasons or MALFORMED in reasons:
            return "the loop is exact on the episodes checked"
        return "the loop is exact on these episodes"

    @staticmethod
    def _naive(reasons: list[str]) -> str:
        """What a ``tito-required`` verdict says about naive re-tokenization."""
        if any(r in reasons for r in NAIVE_PROVEN):
            return "naive re-tokenization would not be: keep the token buffer"
        if any(r.startswith("error:replay_naive_what_if:") for r in reasons):
            return "naive re-tokenization was not checked: keep the token buffer"
        return "naive re-tokenization would be exact too"

    def _unchecked(self, reason: str) -> str:
        """What a ``error:CHECK:WHY`` reason left unchecked, in words; a what-if that ran on nothing says why."""
        if reason == NAIVE_NOTHING:
            naive = next((c for c in self.checks if c.id == "replay_naive_what_if"), None)
            if naive is not None and naive.status == "not_applicable":
                return f"no naive what-if ran: {naive.summary}"
        return UNCHECKED[reason]

    def decide(self) -> None:
        """The loop's rule (``loop_verdict``), not the audit's; the gate's recompute calls this."""
        decision = decide_loop(self.checks)
        self.verdict, self.verdict_reasons = decision.verdict, decision.reasons

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["replay"] = getattr(self, "replay", {})
        return out
