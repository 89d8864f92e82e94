"""Where the trainer's log-probs part from the engine's, and why: numeric drift, TITO divergence, or tokens the
engine never sampled.

Every trained position j (loss mask 1, j > 0) of the trained sequence t gets one class, from ids alone:

- ``numeric``: t[j] is a sampled id of some turn k and t[:j+1] equals what the engine sampled it in (turn k's
  context, the engine's ``prompt_ids[k]`` when logged, then its ids up to j). Same token, same context: what
  remains of the mismatch is the engine's and the trainer's arithmetic (kernels, dtype, batch shape, the
  sampler's processing when the engine logs processed log-probs). Delta = log p_train(t[j]) - logp_engine.
- ``tito``: t[j] is a sampled id (the alignment of t with the reference buffer pairs it with a sampled position,
  equal ids) but its context differs from the one it was sampled in: an earlier divergence moved it. Delta as
  above, against that sampled id's engine log-prob.
- ``never_sampled``: t[j] is no sampled id (an id the trainer put in place of sampled ones, or a template token it
  trained). No engine log-prob exists for it; its log-prob under the policy is reported. Where a run of such ids
  replaces a run of sampled ids that carry log-probs (a re-tokenized word, a re-rendered call), the run is
  compared as one unit, the same text scored both ways: Delta = sum log p_train(trained run) - sum
  logp_engine(sampled run). A run with nothing sampled opposite it (an inserted or duplicated span, a trained
  template token) has no Delta.
- no log-prob: a trained position of one of the classes above whose engine log-prob the log does not give (its
  turn has no ``logprobs``; for a never-sampled run, some sampled id opposite it has none). It is compared with
  nothing, counted per class (``no_logprob``); the shares above are over the measured units only, so a mismatch
  whose divergent positions lack log-probs cannot be called numeric (``report.numeric_drift``).

Per class, with Delta = log p_train - log p_engine as log r for samples drawn by the engine: k1 = -log r and
k3 = r - 1 - log r (the trainer's clamps, ``tito_audit.policy.clamps``), per unit and per sequence (log r summed
over the class's units of an episode); the share of the total |Delta| over all units.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.policy.clamps import k1_k3
from tito_audit.replay.id_diff import align
from tito_audit.replay.weights.pairs import Pair
from tito_audit.rollout.tokens import common_prefix_len

CLASSES = ("numeric", "tito", "never_sampled")


@dataclass
class EpisodeAttribution:
    """One episode's trained positions by class, with each unit's Delta (log p_train - log p_engine)."""

    numeric: dict[int, float] = field(default_factory=dict)  # position -> Delta
    tito: dict[int, float] = field(default_factory=dict)
    never_sampled: dict[int, float] = field(default_factory=dict)  # position -> log p_train (no Delta)
    never_sampled_runs: list[tuple[float, int]] = field(default_factory=list)  # (Delta, trained ids) per run
    no_logprob: dict[str, list[int]] = field(default_factory=lambda: {c: [] for c in CLASSES})  # class -> positions

    def units(self, cls: str) -> list[tuple[float, int]]:
        """(Delta, tokens) of every unit of a class."""
        if cls == "never_sampled":
            return list(self.never_sampled_runs)
        return [(d, 1) for d in getattr(self, cls).values()]


def _numeric(pair: Pair, logp: Mapping[int, float], out: EpisodeAttribution) -> set[int]:
    """The trained positions that hold a sampled id in the very context it was sampled in (``numeric``, or no
    log-prob when its turn has none); returns them."""
    t, tm = pair.trained_ids, pair.trained_mask
    claimed: dict[int, float | None] = {}
    for seq, start, lps in pair.sampled:
        same = common_prefix_len(t, seq)  # t[:same] == seq[:same]
        for j in range(max(start, 1), min(same, len(seq))):
            if tm[j]:
                claimed[j] = lps[j - start] if lps is not None else None
    for j, e in claimed.items():
        if e is None:
            out.no_logprob["numeric"].append(j)
        else:
            out.numeric[j] = logp[j] - e
    return set(claimed)


def _equal_run(
    pair: Pair, logp: Mapping[int, float], left: set[int], i1: int, j1: int, n: int, out: EpisodeAttribution
) -> None:
    """Trained positions aligned with equal buffer ids: a sampled id out of its context (``tito``), or a template
    id of the buffer the trainer trained (``never_sampled``)."""
    bm, be = pair.buffer_mask, pair.engine_logprobs
    for off in range(n):
        j, i = j1 + off, i1 + off
        if j not in left:
            continue
        if not bm[i]:
            out.never_sampled[j] = logp[j]
        elif be[i] is None:
            out.no_logprob["tito"].append(j)
        else:
            out.tito[j] = logp[j] - float(be[i])  # type: ignore[arg-type]


def _replaced_run(
    pair: Pair, logp: Mapping[int, float], trained: list[int], i1: int, i2: int, out: EpisodeAttribution
) -> None:
    """Trained ids no sampled id accounts for (``never_sampled``), compared as one unit with the sampled run they
    replace when every sampled id of it has an engine log-prob."""
    bm, be = pair.buffer_mask, pair.engine_logprobs
    for j in trained:
        out.never_sampled[j] = logp[j]
    sampled = [i for i in range(i1, i2) if bm[i]]
    if trained and sampled and all(be[i] is not None for i in sampled):
        engine = [float(x) for i in sampled if (x := be[i]) is not None]
        delta = sum(logp[j] for j in trained) - sum(engine)
        out.never_sampled_runs.append((delta, len(trained)))
    elif trained and sampled:
        out.no_logprob["never_sampled"].extend(trained)


def attribute(pair: Pair, logp: Mapping[int, float]) -> EpisodeAttribution:
    """Classify every trained position of ``pair`` (``logp``: the trainer's log p at each of them)."""
    out = EpisodeAttribution()
    claimed = _numeric(pair, logp, out)
    left = {j for j in pair.trained_positions if j not in claimed}
    if not left:
        return out
    for tag, i1, i2, j1, j2 in align(pair.buffer_ids, pair.trained_ids):
        if tag == "equal":
            _equal_run(pair, logp, left, i1, j1, j2 - j1, out)
        else:
            _replaced_run(pair, logp, [j for j in range(j1, j2) if j in left], i1, i2, out)
    for positions in out.no_logprob.values():
        positions.sort()
    return out


@dataclass
class ClassStats:
    """Running sums of one class over episodes (constant memory)."""

    units: int = 0
    tokens: int = 0
    sum_abs: float = 0.0
    sum_delta: float = 0.0
    max_abs: float = 0.0
    k1_units: float = 0.0
    k3_units: float = 0.0
    episodes: int = 0
    k1_sequences: float = 0.0
    k3_sequences: float = 0.0

    def add(self, units: Sequence[tuple[float, int]]) -> None:
        if not units:
            return
        self.episodes += 1
        total = 0.0
        for d, n in units:
            self.units += 1
            self.tokens += n
            self.sum_abs += abs(d)
            self.sum_delta += d
            self.max_abs = max(self.max_abs, abs(d))
            k1, k3 = k1_k3(d)
            self.k1_units += k1
            self.k3_units += k3
            total += d
        k1, k3 = k1_k3(total)
        self.k1_sequences += k1
        self.k3_sequences += k3

    def to_dict(self, total_abs: float) -> dict[str, Any]:
        u, e = self.units, self.episodes
        return {
            "units": u,
            "tokens": self.tokens,
            "episodes": e,
            "mean_abs_dlogp": self.sum_abs / u if u else None,
            "mean_dlogp": self.sum_delta / u if u else None,
            "max_abs_dlogp": self.max_abs if u else None,
            "k1_token": self.k1_units / u if u else None,
            "k3_token": self.k3_units / u if u else None,
            "k1_sequence": self.k1_sequences / e if e else None,
            "k3_sequence": self.k3_sequences / e if e else None,
            "share": self.sum_abs / total_abs if total_abs > 0 else None,
        }


@dataclass
class AttributionTotals:
    episodes: int = 0  # episodes attributed (a buffer built and trained tokens)
    with_logprobs: int = 0  # of them, those whose log carries engine log-probs for some attributed token
    classes: dict[str, ClassStats] = field(default_factory=lambda: {c: ClassStats() for c in CLASSES})
    never_sampled_tokens: int = 0
    never_sampled_logp: float = 0.0  # sum of log p_train over them
    never_sampled_unpaired: int = 0  # never-sampled ids with no sampled run opposite them (no Delta)
    no_logprob: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CLASSES, 0))  # trained tokens per class
    correct_loop: ClassStats = field(default_factory=ClassStats)  # the policy on the buffer vs the engine

    def add(self, a: EpisodeAttribution, buffer_deltas: Sequence[float]) -> None:
        self.episodes += 1
        self.with_logprobs += bool(a.numeric or a.tito or a.never_sampled_runs or buffer_deltas)
        for c in CLASSES:
            self.classes[c].add(a.units(c))
        self.never_sampled_tokens += len(a.never_sampled)
        self.never_sampled_logp += sum(a.never_sampled.values())
        self.never_sampled_unpaired += len(a.never_sampled) - sum(n for _, n in a.never_sampled_runs)
        for c in CLASSES:
            self.no_logprob[c] += len(a.no_logprob[c])
        self.correct_loop.add([(d, 1) for d in buffer_deltas])

    @property
    def total_abs(self) -> float:
        return sum(s.sum_abs for s in self.classes.values())

    def share(self, cls: str) -> float | None:
        total = self.total_abs
        return self.classes[cls].sum_abs / total if total > 0 else None

    def to_dict(self) -> dict[str, Any]:
        total = self.total_abs
        classes = {c: self.classes[c].to_dict(total) for c in CLASSES}
        classes["never_sampled"] |= {
            "trained_tokens": self.never_sampled_tokens,
            "mean_logp": self.never_sampled_logp / self.never_sampled_tokens if self.never_sampled_tokens else None,
            "unpaired_tokens": self.never_sampled_unpaired,
        }
        return {
            "episodes": self.episodes,
            "with_logprobs": self.with_logprobs,
            "classes": classes,
            "no_logprob_tokens": sum(self.no_logprob.values()),
            "no_logprob_by_class": dict(self.no_logprob),
            "total_abs_dlogp": total,
            "correct_loop": self.correct_loop.to_dict(0.0) | {"share": None},
        }
