"""Aggregate episode results as they stream in (constant memory): the replay's totals.

Counts cover every episode; findings (with token strips) are kept for the first ``MAX_FINDINGS`` per check,
so a log of a million episodes costs the same memory as one of a thousand. Totals of parts of a log (a chunk, a
Parquet batch, a Ray block) merge in log order into the totals of the whole (``ReplayTotals.merge``), the same
as if every episode had been added here. ``tito_audit.replay.report`` builds the checks and the report from them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tito_audit.replay.analyze import EpisodeResult
from tito_audit.replay.divergence import Divergence

MAX_FINDINGS = 200


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


def kept_class(check: str, item: Divergence | str) -> str:
    """The finding class a kept item is reported with (``report._finding``)."""
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
    by_class: Counter[str] = field(default_factory=Counter)  # per class, the diverged turns holding it
    multi_class_turns: int = 0  # diverged turns holding more than one class (counted in each)
    context_divergences: int = 0  # turns whose engine prompt did not hold the buffer so far
    shape_episodes: int = 0
    logprob_mass: float = 0.0
    logprob_tokens: int = 0
    reference_engine: int = 0
    reference_buffer: int = 0
    reference_errors: int = 0  # episodes not checked (incomplete): no reference could be rebuilt, nothing sampled
    unmasked_episodes: int = 0  # checked episodes without a loss_mask: which ids were trained was not checked
    # checked episodes with neither renders nor log-probs: environment tokens were looked for only in the ids
    environment_stops_only: int = 0
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
    # how the checked turns end (``environment.stop_endings``): with a stop token; without one, followed in the
    # trained sequence by it untrained; without one, followed by other ids (turns but the last)
    stop_ended_turns: int = 0
    stop_untrained_turns: int = 0
    stop_missing_turns: int = 0
    stopless_episodes: int = 0  # checked episodes with sampled ids, none of whose turns holds a stop token
    stop_long_episodes: int = 0  # checked episodes of 3+ sampled turns (``environment.LONG``)
    stop_cut_episodes: int = 0  # of those, episodes none of whose turns holds a stop token, 2+ of them cut before it
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
            self.omitted.setdefault(check, Counter())[kept_class(check, entry.item)] += 1
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
                self.by_class.update(d.classes)  # every class the turn holds: none hides another
                self.multi_class_turns += len(d.classes) > 1
                self.context_divergences += d.kind == "context"
                self._keep("replay_divergence", kept(d.turn, d))
        self.trained_not_sampled += res.trained_not_sampled
        self.sampled_not_trained += res.sampled_not_trained
        self.mask_flips += res.mask_flips
        self.logprob_mass += res.logprob_mass
        self.logprob_tokens += res.logprob_tokens
        self.unmasked_episodes += res.unmasked and res.error is None
        self.environment_stops_only += res.environment_stops_only and res.error is None
        if res.error is None:
            self.stop_ended_turns += res.stop_endings.stopped
            self.stop_untrained_turns += res.stop_endings.untrained
            self.stop_missing_turns += res.stop_endings.missing
            self.stopless_episodes += res.stop_endings.stopless
            self.stop_long_episodes += res.stop_endings.long_episodes
            self.stop_cut_episodes += res.stop_endings.cut_episodes
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
                    self.whatif_by_class.update(d.classes)
                    self._keep("replay_naive_what_if", kept(d.turn, d))
            self.whatif_tokens += res.whatif_tokens
        if res.drift is not None:
            self.drift_episodes += 1
            self.drift_tokens += res.drift_tokens
            if res.drift:
                self.drift_diverged += 1
                self.drift_turns += len(res.drift)
                for d in res.drift:
                    self.drift_by_class.update(d.classes)
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
    def tail_data(self) -> dict[str, int]:
        """``unchecked_tails`` where it happened: a whole log's JSON is as it always was."""
        return {"unchecked_tails": self.unchecked_tails} if self.unchecked_tails else {}

    @property
    def noncanonical_rate(self) -> float:
        return self.noncanonical_turns / self.turns if self.turns else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k not in _FINDING_FIELDS and k != "unchecked_tails"}
        out |= self.tail_data
        for k in _COUNTERS:
            out[k] = dict(sorted(out[k].items()))
        out["logprob_mass"] = round(self.logprob_mass, 6)
        out["noncanonical_rate"] = round(self.noncanonical_rate, 6)
        return out
