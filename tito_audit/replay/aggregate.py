"""Aggregate episode results as they stream in (constant memory), then build the report the formats render.

Counts cover every episode; findings (with token strips) are kept for the first ``MAX_FINDINGS`` per check,
so a log of a million episodes costs the same memory as one of a thousand. The report is an ``AuditReport``
with one model whose checks are the replay's (``tito_audit.replay.checks``): every format, suppression and
baseline of the audit applies unchanged.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tito_audit.audit import AuditReport, ModelReport
from tito_audit.checks.base import CheckResult, Status
from tito_audit.findings import Finding, TokenSide
from tito_audit.replay.analyze import EpisodeResult
from tito_audit.replay.checks import BY_ID
from tito_audit.replay.divergence import Divergence
from tito_audit.verdict import Verdict

MAX_FINDINGS = 200

REPLAY_VERDICTS = {
    "unsafe": "the loop trains on tokens it never sampled, or drops sampled ones: fix the loop",
    "tito-required": "the loop is exact on these episodes; naive re-tokenization would not be: keep the token buffer",
    "safe": "the loop is exact on these episodes, and naive re-tokenization would be too",
    "error": "the log could not be replayed",
}


@dataclass
class ReplayTotals:
    records: int = 0
    episodes: int = 0
    malformed: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    turns: int = 0
    sampled_tokens: int = 0
    trained_tokens: int = 0
    diverged_episodes: int = 0
    diverged_turns: int = 0
    trained_not_sampled: int = 0
    sampled_not_trained: int = 0
    mask_flips: int = 0
    by_class: Counter[str] = field(default_factory=Counter)
    shape_episodes: int = 0
    logprob_mass: float = 0.0
    logprob_tokens: int = 0
    reference_buffer: int = 0
    reference_errors: int = 0
    template_refusals: int = 0
    whatif_episodes: int = 0
    whatif_diverged: int = 0
    whatif_turns: int = 0
    whatif_tokens: int = 0
    whatif_by_class: Counter[str] = field(default_factory=Counter)
    noncanonical_turns: int = 0
    noncanonical_tokens: int = 0
    findings: dict[str, list[tuple[str, Divergence | str]]] = field(default_factory=dict)

    def _keep(self, check: str, label: str, item: Divergence | str) -> None:
        kept = self.findings.setdefault(check, [])
        if len(kept) < MAX_FINDINGS:
            kept.append((label, item))

    def add_malformed(self, line: int, message: str) -> None:
        self.records += 1
        self.malformed += 1
        self._keep("replay_records", f"line {line}", message)

    def add(self, res: EpisodeResult) -> None:
        self.episodes += 1
        self.by_source[res.source] += 1
        self.turns += res.turns
        self.sampled_tokens += res.sampled_tokens
        self.trained_tokens += res.trained_tokens
        label = f"line {res.line}" + (f" ({res.id})" if res.id else "")
        if res.shape:
            self.shape_episodes += 1
            for s in res.shape:
                self._keep("replay_shape", label, s)
        if res.divergences:
            self.diverged_episodes += 1
            self.diverged_turns += len(res.divergences)
            for d in res.divergences:
                self.by_class[d.cls] += 1
                self._keep("replay_divergence", f"{label} turn {d.turn}", d)
        self.trained_not_sampled += res.trained_not_sampled
        self.sampled_not_trained += res.sampled_not_trained
        self.mask_flips += res.mask_flips
        self.logprob_mass += res.logprob_mass
        self.logprob_tokens += res.logprob_tokens
        self.reference_buffer += res.reference == "buffer"
        self.reference_errors += res.error is not None
        self.template_refusals += sum(1 for n in res.notes if "rewrites history" in n)
        if res.whatif is not None:
            self.whatif_episodes += 1
            if res.whatif:
                self.whatif_diverged += 1
                self.whatif_turns += len(res.whatif)
                for d in res.whatif:
                    self.whatif_by_class[d.cls] += 1
                    self._keep("replay_naive_what_if", f"{label} turn {d.turn}", d)
            self.whatif_tokens += res.whatif_tokens
        self.noncanonical_turns += res.noncanonical_turns
        self.noncanonical_tokens += res.noncanonical_tokens

    @property
    def noncanonical_rate(self) -> float:
        return self.noncanonical_turns / self.turns if self.turns else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "findings"}
        for k in ("by_source", "by_class", "whatif_by_class"):
            out[k] = dict(sorted(out[k].items()))
        out["logprob_mass"] = round(self.logprob_mass, 6)
        out["noncanonical_rate"] = round(self.noncanonical_rate, 6)
        return out


class ReplayModelReport(ModelReport):
    """A model report whose verdict speaks about the loop in the log, with the replay totals in JSON."""

    replay: dict[str, Any]

    @property
    def verdict_explanation(self) -> str:
        return REPLAY_VERDICTS[self.verdict]

    def decide(self) -> None:
        """A replay has its own rule (about the loop, not the template); the gate's recompute calls this."""
        self.verdict = replay_verdict(self.checks)
        self.verdict_reasons = []

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["replay"] = getattr(self, "replay", {})
        return out


def replay_verdict(checks: list[CheckResult]) -> Verdict:
    by_id = {c.id: c for c in checks}
    if any(by_id[i].status == "fail" for i in ("replay_divergence", "replay_shape") if i in by_id):
        return "unsafe"
    if "replay_divergence" not in by_id or by_id["replay_divergence"].status == "not_applicable":
        return "error"
    naive = by_id.get("replay_naive_what_if")
    if naive is not None and naive.findings:
        return "tito-required"
    return "safe"


def _finding(check: str, label: str, item: Divergence | str, texts: Any) -> Finding:
    if isinstance(item, str):
        return Finding(check, label, "serialization" if check == "replay_records" else "template", item)
    return Finding(
        check=check,
        scenario=label,
        cls=item.cls,
        message=item.message,
        index=item.index,
        context_start=item.context_start,
        expected=TokenSide(item.expected, texts(item.expected)) if texts else None,
        actual=TokenSide(item.actual, texts(item.actual)) if texts else None,
        affected_trainable=item.tokens,
    )


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else f"{a}/0"


def build_checks(t: ReplayTotals, texts: Any) -> list[CheckResult]:
    """The replay's check results from the totals (status from the kept findings, summary from the counts)."""

    def result(cid: str, summary: str, data: dict[str, Any], applicable: str | None = None) -> CheckResult:
        spec = BY_ID[cid]
        findings = [_finding(cid, label, item, texts) for label, item in t.findings.get(cid, [])]
        status: Status
        if applicable is not None:
            status = "not_applicable"
            summary = applicable
        elif not findings:
            status = "pass"
        else:
            status = "fail" if spec.severity == "error" else "warn"
        return CheckResult(cid, spec.title, status, spec.severity, summary, spec.explanation, spec.fix_hint,
                           findings, data)  # fmt: skip

    out = [
        result("replay_records", f"{t.malformed} of {t.records} record(s) malformed", {"malformed": t.malformed}),
        result("replay_shape", f"{t.shape_episodes} of {t.episodes} episode(s) with a length mismatch", {}),
    ]
    lp = (
        f"; log-prob mass on affected sampled tokens {t.logprob_mass:.3f} over {t.logprob_tokens}"
        if t.logprob_tokens
        else ""
    )
    classes = ", ".join(f"{k} {v}" for k, v in sorted(t.by_class.items())) or "none"
    out.append(
        result(
            "replay_divergence",
            f"diverged: {_pct(t.diverged_episodes, t.episodes)} episodes, {t.diverged_turns} of {t.turns} turns "
            f"({classes}); trained never sampled {t.trained_not_sampled}, sampled not trained "
            f"{t.sampled_not_trained}, mask flips {t.mask_flips}{lp}",
            {
                "trained_not_sampled": t.trained_not_sampled,
                "sampled_not_trained": t.sampled_not_trained,
                "mask_flips": t.mask_flips,
                "by_class": dict(sorted(t.by_class.items())),
                "reference_buffer": t.reference_buffer,
            },
            None if t.episodes else "no episode in the log",
        )
    )
    wclasses = ", ".join(f"{k} {v}" for k, v in sorted(t.whatif_by_class.items())) or "none"
    out.append(
        result(
            "replay_naive_what_if",
            f"naive re-tokenization would diverge in {_pct(t.whatif_diverged, t.whatif_episodes)} episodes, "
            f"{t.whatif_turns} turns ({wclasses}), {t.whatif_tokens} of {t.sampled_tokens} sampled tokens changed",
            {"by_class": dict(sorted(t.whatif_by_class.items())), "tokens": t.whatif_tokens},
            None if t.whatif_episodes else "needs messages in the log (and not --no-what-if)",
        )
    )
    nc = result(
        "replay_noncanonical",
        f"non-canonical sampled turns: {_pct(t.noncanonical_turns, t.turns)}, {t.noncanonical_tokens} token(s)",
        {"turns": t.noncanonical_turns, "of": t.turns, "rate": round(t.noncanonical_rate, 6)},
        None if t.turns else "no sampled turn in the log",
    )
    if t.noncanonical_turns:
        nc.findings = [
            Finding(
                "replay_noncanonical",
                "all episodes",
                "non_canonical",
                f"{t.noncanonical_turns} of {t.turns} sampled turns are not the tokenizer's encoding of their text",
                rate=t.noncanonical_rate,
                affected_trainable=t.noncanonical_tokens,
            )
        ]
        nc.status = "warn"
    out.append(nc)
    return out


def build_report(t: ReplayTotals, model: Any, log: str, texts: Any, seconds: float = 0.0) -> AuditReport:
    m = ReplayModelReport(model.name, "error", model.provenance)
    m.checks = build_checks(t, texts)
    m.decide()
    m.seconds = seconds
    m.options = {"log": log}
    m.scenarios = {"played": t.episodes, "not_applicable": {}, "adapted": {}}
    m.replay = t.to_dict()
    return AuditReport([m])
