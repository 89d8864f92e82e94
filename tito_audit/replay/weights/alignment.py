"""Which positions the logged log-probs belong to: the alignment hypotheses tested against the policy's own log p
(issue 38, item 1).

At every ``numeric`` position (the sampled token in the very context it was sampled in: ``attribution``), the
trainer's log p of token i of a turn is compared with the turn's logged array under each hypothesis:

- ``logged``: ``logprobs[i]`` (the record's own alignment);
- ``shift s`` (s = -2, -1, +1, +2): ``logprobs[k]`` is the log-prob of ``ids[k + s]``, so token i's is at ``i - s``
  (a logger off by s; positions whose partner falls outside the turn are left out);
- ``reversed``: the turn's array in reverse order;
- ``processed``: ``logprobs[i]`` against the policy's log q(token), q the sampler's processed distribution
  (temperature, top-k, top-p: ``policy.sampler_distribution``), when the sampler is known and not pure.

Each hypothesis's mean |Delta log p| is compared with the logged alignment's on the same positions. A hypothesis
*explains the mismatch far better* (``explains``) when its mean is at most ``1 / FAR`` of the logged one and
lower by at least the numeric-drift threshold, over at least ``MIN_POSITIONS`` positions. ``FAR`` comes from
measurement on real logs (``scripts/real_policy_figures.py``, ``benchmarks/results/real-policy/alignment.json``):
on logs sampled from SmolLM2-135M-Instruct by four engines, the right alignment's mean |Delta| is 8e-6 (a float32
engine) to 0.042 (a bfloat16 engine), every wrong one's 1.3 to 3.6, a separation of 34 times or more; 10 sits
between with room on each side, and the absolute margin keeps two noise-level means from ever naming a bug.

The rule is applied to the whole log, then to each episode with at least ``MIN_POSITIONS`` positions on its own: a
logger wrong in some episodes only (one code path, one worker) is diluted in the log-wide means, where neither the
logged alignment nor any shift fits, and would read as numeric drift.

A shift or the reversal that explains the mismatch is a logging bug (``replay_logprob_alignment`` fails: the
trainer's importance ratios pair each token with another token's log-prob); the processed distribution is the
engine's documented option (vLLM's ``logprobs_mode``), named, not a bug.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tito_audit.replay.weights.pairs import Pair
from tito_audit.rollout.tokens import common_prefix_len

SHIFTS = (-2, -1, 1, 2)
HYPOTHESES = ("shift -2", "shift -1", "shift +1", "shift +2", "reversed", "processed")
FAR = 10.0  # a hypothesis explains the mismatch far better: its mean |Delta| at most 1/FAR of the logged one
MIN_POSITIONS = 8  # fewer compared positions test nothing
BUGS = {
    "shift +1": "log-probs are logged one position late (logprobs[k] is the log-prob of ids[k+1])",
    "shift +2": "log-probs are logged two positions late (logprobs[k] is the log-prob of ids[k+2])",
    "shift -1": "log-probs are logged one position early (logprobs[k] is the log-prob of ids[k-1])",
    "shift -2": "log-probs are logged two positions early (logprobs[k] is the log-prob of ids[k-2])",
    "reversed": "log-probs are logged in reverse order within each turn",
}
PROCESSED = (
    "the engine logs the sampler's processed log-probs (log q after temperature, top-k and top-p), not the "
    "policy's: the mismatch is the sampler's processing"
)


@dataclass
class Hypothesis:
    """Running sums of one hypothesis and of the logged alignment on the same positions."""

    positions: int = 0
    sum_abs: float = 0.0
    logged_sum_abs: float = 0.0

    def add(self, delta: float, logged_delta: float) -> None:
        self.positions += 1
        self.sum_abs += abs(delta)
        self.logged_sum_abs += abs(logged_delta)

    def merge(self, other: Hypothesis) -> None:
        self.positions += other.positions
        self.sum_abs += other.sum_abs
        self.logged_sum_abs += other.logged_sum_abs

    @property
    def mean(self) -> float | None:
        return self.sum_abs / self.positions if self.positions else None

    @property
    def logged_mean(self) -> float | None:
        return self.logged_sum_abs / self.positions if self.positions else None

    def explains(self, threshold: float) -> bool:
        """Far better than the logged alignment (see the module docstring)."""
        mean, logged = self.mean, self.logged_mean
        if mean is None or logged is None or self.positions < MIN_POSITIONS:
            return False
        return mean * FAR <= logged and logged - mean >= threshold


def _fresh() -> dict[str, Hypothesis]:
    return {h: Hypothesis() for h in HYPOTHESES}


@dataclass
class AlignmentTotals:
    """The logged alignment and every hypothesis, over the numeric positions of every episode attributed; and, per
    episode, the logging bugs that explain that episode's mismatch far better on their own (a logger that is wrong
    in some episodes only, one code path or one worker, is diluted in the log-wide means: ``episode_bugs``)."""

    positions: int = 0
    logged_sum_abs: float = 0.0
    hypotheses: dict[str, Hypothesis] = field(default_factory=_fresh)
    tested_episodes: int = 0  # episodes with at least MIN_POSITIONS positions
    # bug -> [(episode label, that episode's hypothesis)] where it passes the ratio test (the threshold is applied
    # when read: ``episode_bugs``)
    candidates: dict[str, list[tuple[str, Hypothesis]]] = field(default_factory=dict)

    def add(self, pair: Pair, logp: Mapping[int, float], processed: Mapping[int, float] | None = None) -> None:
        """The numeric positions of ``pair`` (``logp``: the trainer's log p; ``processed``: its log q under the
        sampler, when known and not pure)."""
        mine = _fresh()
        before = self.positions
        self._add(pair, logp, processed, mine)
        for name, h in mine.items():
            self.hypotheses[name].merge(h)
        if self.positions - before < MIN_POSITIONS:
            return
        self.tested_episodes += 1
        label = f"line {pair.line} ({pair.id})"
        for name, h in mine.items():
            if name in BUGS and h.explains(0.0):
                self.candidates.setdefault(name, []).append((label, h))

    def _add(
        self,
        pair: Pair,
        logp: Mapping[int, float],
        processed: Mapping[int, float] | None,
        hypotheses: dict[str, Hypothesis],
    ) -> None:
        t, tm = pair.trained_ids, pair.trained_mask
        for seq, start, lps in pair.sampled:
            if lps is None:
                continue
            n = len(lps)
            same = common_prefix_len(t, seq)
            for j in range(max(start, 1), min(same, len(seq))):
                if not tm[j] or j not in logp:
                    continue
                i = j - start
                logged = logp[j] - lps[i]
                self.positions += 1
                self.logged_sum_abs += abs(logged)
                for s in SHIFTS:
                    if 0 <= i - s < n:
                        hypotheses[f"shift {s:+d}"].add(logp[j] - lps[i - s], logged)
                if n > 1:
                    hypotheses["reversed"].add(logp[j] - lps[n - 1 - i], logged)
                if processed is not None and j in processed:
                    hypotheses["processed"].add(processed[j] - lps[i], logged)

    @property
    def logged_mean(self) -> float | None:
        return self.logged_sum_abs / self.positions if self.positions else None

    def bug(self, threshold: float) -> str | None:
        """The logging bug that explains the mismatch far better than the logged alignment: over the whole log (the
        best such), else in the most episodes on their own; or None."""
        found = [(h.mean, name) for name, h in self.hypotheses.items() if name in BUGS and h.explains(threshold)]
        if found:
            return min(found)[1]
        per = self.episode_bugs(threshold)
        return max(per, key=lambda name: len(per[name][0])) if per else None

    def episode_bugs(self, threshold: float) -> dict[str, tuple[list[str], Hypothesis]]:
        """Per logging bug: the episodes whose own mismatch it explains far better (labels, in log order) and its
        evidence summed over them."""
        out: dict[str, tuple[list[str], Hypothesis]] = {}
        for name, found in self.candidates.items():
            kept = [(label, h) for label, h in found if h.explains(threshold)]
            if kept:
                total = Hypothesis()
                for _, h in kept:
                    total.merge(h)
                out[name] = ([label for label, _ in kept], total)
        return out

    def evidence(self, bug: str, threshold: float) -> tuple[Hypothesis, list[str] | None]:
        """``bug``'s evidence: log-wide (episodes None) when it explains the whole log, else over its episodes."""
        h = self.hypotheses[bug]
        if h.explains(threshold):
            return h, None
        episodes, total = self.episode_bugs(threshold)[bug]
        return total, episodes

    def processed_explains(self, threshold: float) -> bool:
        return self.hypotheses["processed"].explains(threshold)

    def to_dict(self) -> dict[str, Any]:
        return {
            "positions": self.positions,
            "logged_mean_abs_dlogp": self.logged_mean,
            "hypotheses": {
                name: {"positions": h.positions, "mean_abs_dlogp": h.mean, "logged_mean_abs_dlogp": h.logged_mean}
                for name, h in self.hypotheses.items()
            },
            "tested_episodes": self.tested_episodes,
            "far": FAR,
            "min_positions": MIN_POSITIONS,
        }
