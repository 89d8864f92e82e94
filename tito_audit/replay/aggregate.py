"""Aggregate episode results as they stream in (constant memory), then build the report the formats render.

Counts cover every episode; findings (with token strips) are kept for the first ``MAX_FINDINGS`` per check,
so a log of a million episodes costs the same memory as one of a thousand. Totals of parts of a log (a chunk, a
Parquet batch, a Ray block) merge in log order into the totals of the whole (``ReplayTotals.merge``), the same
as if every episode had been added here. The report is an ``AuditReport`` with one model whose checks are the
replay's (``tito_audit.replay.checks``): every format, suppression and baseline of the audit applies unchanged.

The verdict follows the audit's rule (``replay_verdict``): a divergence proves ``unsafe``; ``safe`` needs the
naive what-if to have run on every episode and been exact, and no non-canonical sample; what was not checked
(no what-if, episodes whose reference could not be rebuilt) keeps the verdict from ``safe`` and is named.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tito_audit.replay.analyze import EpisodeResult
from tito_audit.replay.checks import BY_ID
from tito_audit.replay.divergence import Divergence
from tito_audit.report.check_result import CheckResult, Status
from tito_audit.report.findings import Finding, TokenSide
from tito_audit.report.model_report import AuditReport, ModelReport
from tito_audit.report.verdict import Verdict

MAX_FINDINGS = 200

REPLAY_VERDICTS = {
    "unsafe": "the loop trains on tokens it never sampled, or drops sampled ones: fix the loop",
    "tito-required": "the loop is exact on these episodes; naive re-tokenization would not be: keep the token buffer",
    "safe": "the loop is exact on these episodes, and naive re-tokenization would be too",
    "error": "nothing in the log could be checked",
}


class Kept(NamedTuple):
    """One kept finding: where (file, line, episode id, turn) and what."""

    file: str
    line: int
    id: str
    turn: int | None
    item: Divergence | str

    def label(self) -> str:
        where = f"{self.file} line {self.line}" if self.file else f"line {self.line}"
        out = where + (f" ({self.id})" if self.id else "")
        return out + (f" turn {self.turn}" if self.turn is not None else "")


class Malformed(NamedTuple):
    """A record that could not be replayed."""

    line: int
    message: str
    file: str = ""
    out_of_vocabulary: bool = False
    unchecked_tail: bool = False  # not a record: the log's end could not be checked (``reader.UncheckedTail``)


_COUNTERS = ("by_source", "by_class", "whatif_by_class", "drift_by_class")
_FINDING_FIELDS = ("kept", "omitted", "first_omitted")  # findings, not counts: merged and reported on their own


def _cls(check: str, item: Divergence | str) -> str:
    """The finding class an item is reported with (``_finding``)."""
    if isinstance(item, str):
        return "serialization" if check == "replay_records" else "template"
    return item.cls


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
    context_divergences: int = 0  # turns whose engine prompt did not hold the buffer so far
    shape_episodes: int = 0
    logprob_mass: float = 0.0
    logprob_tokens: int = 0
    reference_engine: int = 0
    reference_buffer: int = 0
    reference_errors: int = 0  # episodes not checked (incomplete): no reference could be rebuilt, nothing sampled
    unmasked_episodes: int = 0  # checked episodes without a loss_mask: which ids were trained was not checked
    no_trainer_episodes: int = 0  # checked episodes with no trained sequence logged: the engine's side only
    template_refusals: int = 0
    whatif_episodes: int = 0
    whatif_failed: int = 0
    whatif_diverged: int = 0
    whatif_turns: int = 0
    whatif_tokens: int = 0
    whatif_by_class: Counter[str] = field(default_factory=Counter)
    drift_episodes: int = 0
    drift_diverged: int = 0
    drift_turns: int = 0
    drift_tokens: int = 0
    drift_by_class: Counter[str] = field(default_factory=Counter)
    noncanonical_checked: int = 0  # episodes whose sampled turns were re-encoded
    noncanonical_turns: int = 0
    noncanonical_tokens: int = 0
    out_of_vocabulary: int = 0  # records with an id the tokenizer does not have
    mark_episodes: int = 0  # episodes whose ids hold a control token of the template
    stop_turns: int = 0  # sampled turns ending with one of the model's stop tokens
    unchecked_tails: int = 0  # logs whose end could not be checked (a gzip trailer cut short): not records
    kept: dict[str, list[Kept]] = field(default_factory=dict)
    # findings past the first MAX_FINDINGS of a check: counted per class, the first of them kept for its place
    omitted: dict[str, Counter[str]] = field(default_factory=dict)
    first_omitted: dict[str, Kept] = field(default_factory=dict)

    def _keep(self, check: str, entry: Kept) -> None:
        kept = self.kept.setdefault(check, [])
        if len(kept) < MAX_FINDINGS:
            kept.append(entry)
        else:
            self.omitted.setdefault(check, Counter())[_cls(check, entry.item)] += 1
            self.first_omitted.setdefault(check, entry)

    @property
    def findings(self) -> dict[str, list[tuple[str, Divergence | str]]]:
        """The kept findings per check as ``(label, item)``."""
        return {check: [(k.label(), k.item) for k in kept] for check, kept in self.kept.items()}

    def add_malformed(self, line: int, message: str, file: str = "", out_of_vocabulary: bool = False) -> None:
        self.records += 1
        self.malformed += 1
        self.out_of_vocabulary += out_of_vocabulary
        self._keep("replay_records", Kept(file, line, "", None, message))

    def add_unchecked_tail(self, line: int, message: str, file: str = "") -> None:
        """The log's end could not be checked (a gzip trailer cut short): named, never counted as a record."""
        self.unchecked_tails += 1
        self._keep("replay_records", Kept(file, line, "", None, message))

    def add(self, res: EpisodeResult) -> None:
        self.episodes += 1
        self.by_source[res.source] += 1
        self.turns += res.turns
        self.sampled_tokens += res.sampled_tokens
        self.trained_tokens += res.trained_tokens
        self.mark_episodes += res.marks
        self.stop_turns += res.stop_turns

        def kept(turn: int | None, item: Divergence | str) -> Kept:
            return Kept(res.file, res.line, res.id, turn, item)

        if res.shape:
            self.shape_episodes += 1
            for s in res.shape:
                self._keep("replay_shape", kept(None, s))
        if res.divergences:
            self.diverged_episodes += 1
            self.diverged_turns += len(res.divergences)
            for d in res.divergences:
                self.by_class[d.cls] += 1
                self.context_divergences += d.kind == "context"
                self._keep("replay_divergence", kept(d.turn, d))
        self.trained_not_sampled += res.trained_not_sampled
        self.sampled_not_trained += res.sampled_not_trained
        self.mask_flips += res.mask_flips
        self.logprob_mass += res.logprob_mass
        self.logprob_tokens += res.logprob_tokens
        self.unmasked_episodes += res.unmasked and res.error is None
        self.no_trainer_episodes += res.no_trainer and res.error is None
        self.reference_engine += res.reference == "engine" and res.error is None
        self.reference_buffer += res.reference == "buffer" and res.error is None
        if res.error is not None:
            self.reference_errors += 1
            self._keep("replay_incomplete", kept(None, res.error))
        self.template_refusals += sum(1 for n in res.notes if "rewrites history" in n)
        self.whatif_failed += res.whatif_failed
        if res.whatif is not None:
            self.whatif_episodes += 1
            if res.whatif:
                self.whatif_diverged += 1
                self.whatif_turns += len(res.whatif)
                for d in res.whatif:
                    self.whatif_by_class[d.cls] += 1
                    self._keep("replay_naive_what_if", kept(d.turn, d))
            self.whatif_tokens += res.whatif_tokens
        if res.drift is not None:
            self.drift_episodes += 1
            self.drift_tokens += res.drift_tokens
            if res.drift:
                self.drift_diverged += 1
                self.drift_turns += len(res.drift)
                for d in res.drift:
                    self.drift_by_class[d.cls] += 1
                    self._keep("replay_context_drift", kept(d.turn, d))
        self.noncanonical_checked += res.noncanonical_checked
        self.noncanonical_turns += res.noncanonical_turns
        self.noncanonical_tokens += res.noncanonical_tokens

    def merge(self, other: ReplayTotals, line_offset: int = 0, file: str | None = None) -> None:
        """Add the totals of the next part of the log (its lines shifted by ``line_offset``, its findings named
        after ``file`` when given)."""
        for name, value in other.__dict__.items():
            if name in _FINDING_FIELDS:
                continue
            mine = getattr(self, name)
            if isinstance(mine, Counter):
                mine.update(value)
            else:
                setattr(self, name, mine + value)

        def moved(e: Kept) -> Kept:
            return e._replace(line=e.line + line_offset, file=e.file if file is None else file)

        for check, entries in other.kept.items():
            for e in entries:
                self._keep(check, moved(e))
        for check, counts in other.omitted.items():  # after the other part's kept ones: log order
            self.omitted.setdefault(check, Counter()).update(counts)
            self.first_omitted.setdefault(check, moved(other.first_omitted[check]))

    @property
    def checked_episodes(self) -> int:
        return self.episodes - self.reference_errors

    @property
    def noncanonical_rate(self) -> float:
        return self.noncanonical_turns / self.turns if self.turns else 0.0

    @property
    def tail_data(self) -> dict[str, int]:
        """``unchecked_tails`` where it happened: a whole log's JSON is as it always was."""
        return {"unchecked_tails": self.unchecked_tails} if self.unchecked_tails else {}

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in _FINDING_FIELDS and k != "unchecked_tails"}
        out |= self.tail_data
        for k in _COUNTERS:
            out[k] = dict(sorted(out[k].items()))
        out["logprob_mass"] = round(self.logprob_mass, 6)
        out["noncanonical_rate"] = round(self.noncanonical_rate, 6)
        return out


class ReplayModelReport(ModelReport):
    """A model report whose verdict speaks about the loop in the log, with the replay totals in JSON."""

    replay: dict[str, Any]

    @property
    def verdict_explanation(self) -> str:
        base = REPLAY_VERDICTS[self.verdict]
        reasons = self.verdict_reasons
        if self.verdict == "tito-required":
            if any(r.startswith("tito-required:suppressed:") for r in reasons):
                loop = "the loop diverges where findings are suppressed (accepted, not fixed)"
            elif NO_TRAINER in reasons:
                loop = (
                    "the trainer side was not logged: each engine prompt holds the earlier samples as sampled, what "
                    "was trained was not checked"
                )
            elif NO_LOSS_MASK in reasons or TURNS_ONLY in reasons:
                loop = "every sampled turn sits in the trained sequence as sampled"
            elif "error:replay_divergence:incomplete" in reasons or MALFORMED in reasons:
                loop = "the loop is exact on the episodes checked"
            else:
                loop = "the loop is exact on these episodes"
            if any(r in reasons for r in _NAIVE_PROVEN):
                naive = "naive re-tokenization would not be: keep the token buffer"
            elif any(r.startswith("error:replay_naive_what_if:") for r in reasons):
                naive = "naive re-tokenization was not checked: keep the token buffer"
            else:
                naive = "naive re-tokenization would be exact too"
            base = f"{loop}; {naive}"
        unchecked = [self._unchecked(r) for r in reasons if r in _UNCHECKED]
        return base + (f" ({'; '.join(unchecked)})" if unchecked else "")

    def _unchecked(self, reason: str) -> str:
        """What a ``error:CHECK:WHY`` reason left unchecked, in words; a what-if that ran on nothing says why."""
        if reason == "error:replay_naive_what_if:compared_nothing":
            naive = next((c for c in self.checks if c.id == "replay_naive_what_if"), None)
            if naive is not None and naive.status == "not_applicable":
                return f"no naive what-if ran: {naive.summary}"
        return _UNCHECKED[reason]

    def decide(self) -> None:
        """A replay has its own rule (about the loop, not the template); the gate's recompute calls this."""
        self.verdict, self.verdict_reasons = replay_verdict(self.checks)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out["replay"] = getattr(self, "replay", {})
        return out


NO_LOSS_MASK = "error:replay_divergence:no_loss_mask"
TURNS_ONLY = "error:replay_divergence:turns_only"
MALFORMED = "error:replay_records:malformed"
UNCHECKED_TAIL = "error:replay_records:unchecked_tail"
_TAIL = "; the log's end could not be checked (a gzip trailer cut short)"
NO_TRAINER = "error:replay_divergence:no_trainer"
_NAIVE_PROVEN = ("tito-required:replay_naive_what_if", "tito-required:replay_noncanonical")
_UNCHECKED = {
    "error:replay_divergence:incomplete": "some episodes could not be checked: see replay_incomplete",
    MALFORMED: "some records could not be read, their episodes were not checked: see replay_records",
    UNCHECKED_TAIL: "the log ends inside a gzip trailer: its records were read whole, their checksum not checked",
    NO_TRAINER: "some episodes log no trained sequence (a vLLM dump): the trainer side was not checked, only the "
    "engine's prompts against its own samples",
    NO_LOSS_MASK: "some episodes have no loss_mask (as a vLLM dump without trainer fields): which ids were trained "
    "was not checked",
    TURNS_ONLY: "some episodes have neither prompt_ids nor messages: only their sampled turns were looked for, the "
    "context the engine saw was not checked",
    "error:replay_naive_what_if:compared_nothing": "no naive what-if ran",
    "error:replay_naive_what_if:not_run": "the naive what-if did not run on every episode",
}


def replay_verdict(checks: list[CheckResult]) -> tuple[Verdict, list[str]]:
    """The audit's rule, for a loop: a divergence proves ``unsafe``; nothing compared is ``error``; ``safe``
    needs the naive what-if on every episode, exact, and no non-canonical sample; what was not checked is named
    (``error:CHECK:WHY`` reasons beside the verdict) and keeps it from ``safe``."""
    by_id = {c.id: c for c in checks}
    reasons = [f"unsafe:{i}" for i in ("replay_divergence", "replay_shape") if i in by_id and by_id[i].status == "fail"]
    # as in the audit: a suppression accepts a divergence, it does not make the loop exact
    reasons += [
        f"tito-required:suppressed:{i}"
        for i in ("replay_divergence", "replay_shape")
        if i in by_id and by_id[i].status != "fail" and any(f.suppressed for f in by_id[i].findings)
    ]
    div = by_id.get("replay_divergence")
    incomplete = by_id.get("replay_incomplete")
    if incomplete is not None and incomplete.findings:
        reasons.append("error:replay_divergence:incomplete")
    records = by_id.get("replay_records")
    if records is not None and records.findings:  # a record not read is an episode not checked: never safe
        tails = records.data.get("unchecked_tails", 0)
        reasons += [MALFORMED] * (len(records.findings) > tails) + [UNCHECKED_TAIL] * bool(tails)
    if div is None or div.status == "not_applicable":  # a shape finding still proves unsafe
        proven = any(r.startswith("unsafe:") for r in reasons)
        return ("unsafe" if proven else "error"), [*reasons, "error:replay_divergence:compared_nothing"]
    if div.data.get("no_trainer_episodes"):
        reasons.append(NO_TRAINER)
    if div.data.get("unmasked_episodes"):
        reasons.append(NO_LOSS_MASK)
    if div.data.get("reference_sampled"):
        reasons.append(TURNS_ONLY)
    naive = by_id.get("replay_naive_what_if")
    noncanonical = by_id.get("replay_noncanonical")
    if naive is not None and naive.findings:
        reasons.append("tito-required:replay_naive_what_if")
    if noncanonical is not None and noncanonical.findings:
        reasons.append("tito-required:replay_noncanonical")
    if naive is None or naive.status == "not_applicable":
        reasons.append("error:replay_naive_what_if:compared_nothing")
    elif naive.data.get("episodes", 0) < naive.data.get("of", 0):
        reasons.append("error:replay_naive_what_if:not_run")
    if any(r.startswith("unsafe:") for r in reasons):
        return "unsafe", reasons
    if div.comparisons == 0:
        return "error", reasons
    return ("tito-required" if reasons else "safe"), reasons


def _finding(check: str, label: str, item: Divergence | str, texts: Any) -> Finding:
    if isinstance(item, str):
        # an episode not checked names itself in the message too: formats without a location column show it
        message = f"{label}: {item}" if check == "replay_incomplete" else item
        return Finding(check, label, _cls(check, item), message)
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


def _not_kept(t: ReplayTotals, check: str) -> list[Finding]:
    """One finding per class for the findings counted past the first ``MAX_FINDINGS``: the check's status, the gate,
    suppressions and baselines see them. The scenario names no episode, so a suppression of some episodes (a
    scenario pattern) never covers them; its count is in it, so a baseline with another count does not either."""
    first = t.first_omitted.get(check)
    return [
        Finding(
            check,
            f"{n} more past the first {MAX_FINDINGS}",
            cls,
            f"{n} more {cls} finding(s) past the first {MAX_FINDINGS} kept (counted, strips not kept); the first "
            f"finding not kept is at {first.label() if first else '?'}",
        )
        for cls, n in sorted(t.omitted.get(check, Counter()).items())
    ]


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else f"{a}/0"


def _classes(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def _nothing_checked(t: ReplayTotals) -> str:
    if not t.episodes:
        return "no episode in the log"
    return f"none of {t.episodes} episode(s) could be checked (see replay_incomplete)"


def _whatif_not_run(t: ReplayTotals) -> str:
    """Why no what-if ran, from what the log held: it needs messages, a template that renders them, the switch on."""
    if t.whatif_failed:
        return (
            f"the template did not render the messages of {t.whatif_failed} of {t.episodes} episode(s), and no "
            "other episode ran it (see replay_incomplete and the notes)"
        )
    return "needs messages in the log (and not --no-what-if or --only-tito)"


def build_checks(t: ReplayTotals, texts: Any) -> list[CheckResult]:
    """The replay's check results from the totals (status from the kept findings, summary from the counts)."""

    def result(
        cid: str, summary: str, data: dict[str, Any], comparisons: int, applicable: str | None = None
    ) -> CheckResult:
        spec = BY_ID[cid]
        findings = [_finding(cid, k.label(), k.item, texts) for k in t.kept.get(cid, [])]
        findings += _not_kept(t, cid)
        status: Status
        if applicable is not None:
            status = "not_applicable"
            summary = applicable
        elif not findings:
            status = "pass"
        else:
            status = "fail" if spec.severity == "error" else "warn"
        return CheckResult(cid, spec.title, status, spec.severity, summary, spec.explanation, spec.fix_hint,
                           findings, data, comparisons)  # fmt: skip

    out = [
        result(
            "replay_records",
            f"{t.malformed} of {t.records} record(s) malformed{_TAIL * bool(t.unchecked_tails)}",
            {"malformed": t.malformed, "out_of_vocabulary": t.out_of_vocabulary} | t.tail_data,
            t.records,
        ),
        result(
            "replay_incomplete",
            f"{t.reference_errors} of {t.episodes} episode(s) not checked (each named with why)"
            if t.reference_errors
            else f"every one of {t.episodes} episode(s) checked against a reference"
            + (
                f"; {t.no_trainer_episodes} with no trained sequence logged: their trainer side was not checked"
                if t.no_trainer_episodes
                else ""
            ),
            {"not_checked": t.reference_errors, "of": t.episodes},
            t.episodes,
            None if t.episodes else "no episode in the log",
        ),
        result(
            "replay_shape",
            f"{t.shape_episodes} of {t.episodes} episode(s) with a length mismatch",
            {},
            t.episodes,
            None if t.episodes else "no episode in the log",
        ),
    ]
    lp = (
        f"; log-prob mass on affected sampled tokens {t.logprob_mass:.3f} over {t.logprob_tokens}"
        if t.logprob_tokens
        else ""
    )
    ctx = f", {t.context_divergences} in the engine's prompts" if t.context_divergences else ""
    sampled_only = t.checked_episodes - t.reference_engine - t.reference_buffer
    kinds = (
        ("engine prompts", t.reference_engine),
        ("rebuilt buffers", t.reference_buffer),
        ("sampled turns only", sampled_only),
    )
    against = ", ".join(f"{name} {n}" for name, n in kinds if n) or "nothing"
    if t.no_trainer_episodes:
        against += (
            f"; {t.no_trainer_episodes} episode(s) without a trained sequence: the trainer side was not logged, the "
            "engine's last prompt and output stand in for it (its contexts were checked, not what was trained)"
        )
    if t.unmasked_episodes:
        against += f"; {t.unmasked_episodes} episode(s) without loss_mask: which ids were trained was not checked"
    out.append(
        result(
            "replay_divergence",
            f"diverged: {_pct(t.diverged_episodes, t.checked_episodes)} episodes, {t.diverged_turns} of {t.turns} "
            f"turns ({_classes(t.by_class)}){ctx}; trained never sampled {t.trained_not_sampled}, sampled not "
            f"trained {t.sampled_not_trained}, mask flips {t.mask_flips}{lp}; against {against}",
            {
                "trained_not_sampled": t.trained_not_sampled,
                "sampled_not_trained": t.sampled_not_trained,
                "mask_flips": t.mask_flips,
                "by_class": dict(sorted(t.by_class.items())),
                "context_divergences": t.context_divergences,
                "reference_engine": t.reference_engine,
                "reference_buffer": t.reference_buffer,
                "reference_sampled": sampled_only,
                "unmasked_episodes": t.unmasked_episodes,
                "no_trainer_episodes": t.no_trainer_episodes,
            },
            t.checked_episodes,
            None if t.checked_episodes or t.diverged_episodes else _nothing_checked(t),
        )
    )
    out.append(
        result(
            "replay_context_drift",
            f"the loop's context differs from the template's rendering in {_pct(t.drift_diverged, t.drift_episodes)} "
            f"episodes, {t.drift_turns} turns ({_classes(t.drift_by_class)}), {t.drift_tokens} context ids",
            {
                "episodes": t.drift_episodes,
                "by_class": dict(sorted(t.drift_by_class.items())),
                "tokens": t.drift_tokens,
            },
            t.drift_episodes,
            None if t.drift_episodes else "needs the engine's prompt_ids and messages in the log (and not --no-drift)",
        )
    )
    failed = f"; the template does not re-render {t.whatif_failed} episode(s)" if t.whatif_failed else ""
    out.append(
        result(
            "replay_naive_what_if",
            f"naive re-tokenization would diverge in {_pct(t.whatif_diverged, t.whatif_episodes)} episodes, "
            f"{t.whatif_turns} turns ({_classes(t.whatif_by_class)}), {t.whatif_tokens} of {t.sampled_tokens} "
            f"sampled tokens changed; ran on {t.whatif_episodes} of {t.checked_episodes} episode(s){failed}",
            {
                "by_class": dict(sorted(t.whatif_by_class.items())),
                "tokens": t.whatif_tokens,
                "episodes": t.whatif_episodes,
                "of": t.checked_episodes,
                "failed": t.whatif_failed,
            },
            t.whatif_episodes,
            None if t.whatif_episodes else _whatif_not_run(t),
        )
    )
    nc = result(
        "replay_noncanonical",
        f"non-canonical sampled turns: {_pct(t.noncanonical_turns, t.turns)}, {t.noncanonical_tokens} token(s)",
        {"turns": t.noncanonical_turns, "of": t.turns, "rate": round(t.noncanonical_rate, 6)},
        t.noncanonical_checked,
        None if t.turns and t.noncanonical_checked else "no sampled turn re-encoded (none in the log, or --only-tito)",
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


def build_report(
    t: ReplayTotals, model: Any, log: str, texts: Any, seconds: float = 0.0, date: str | None = None
) -> AuditReport:
    """The report; ``date``: what renders saw for records without their own ``date``."""
    m = ReplayModelReport(model.name, "error", model.provenance)
    m.checks = build_checks(t, texts)
    m.decide()
    m.seconds = seconds
    m.options = {"log": log} if date is None else {"log": log, "date": date}
    m.scenarios = {"played": t.episodes, "not_applicable": {}, "adapted": {}}
    m.replay = t.to_dict()
    return AuditReport([m])
