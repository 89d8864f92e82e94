"""What the user's KL term averages to under the user's sampler, exactly, over every sampled position replayed.

At each sampled position of the reference buffer (where the engine drew a token), the policy's and the
reference's full logits give the exact KL(pi || pi_ref), what k1, k2 and k3 average to when tokens are drawn from
the sampler's q instead of pi, and the policy's mass q never draws (``tito_audit.policy.kl_bias.
position_expectations``, which ``tito-audit rl`` uses too: temperature, top-k, top-p, stop ids suppressed before a
minimum length, padding rows past the tokenizer). Position means are summed here as the episodes stream by.

The recommendation follows from the numbers: under pure sampling k1 and k3 are both exact and k3 is chosen (it
is >= 0 per token, so its token mean has the lower variance); otherwise the estimator with the smallest exact
|bias|, and when even that one is off by more than ``RELATIVE_BIAS`` of the KL, the advice is to sample purely
(or to compute the KL from the full distributions, which the trainer has).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch

from tito_audit.policy.kl_bias import FIELDS

RELATIVE_BIAS = 0.1  # an estimator off by more than this share of the KL is not a KL estimate


@dataclass
class BiasTotals:
    """Sums over every sampled position whose sampler is known (constant memory)."""

    positions: int = 0
    with_reference: bool = False
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FIELDS, 0.0))
    truncated_max: float = 0.0
    settings: Counter[str] = field(default_factory=Counter)  # episodes per sampler description
    sources: Counter[str] = field(default_factory=Counter)  # episodes per source (--sampling, log)
    pure: bool = True  # every episode's sampler is pure
    unknown: int = 0  # episodes whose sampler is unknown
    refused: int = 0  # episodes whose record's sampling object could not be used
    refused_example: str = ""
    conflicts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (--sampling, the log's) per episode
    conflict_first: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, found: dict[str, torch.Tensor]) -> None:
        n = int(found["kl"].numel())
        if not n:
            return
        self.positions += n
        for k in FIELDS:
            self.sums[k] += float(found[k].double().sum())
        self.truncated_max = max(self.truncated_max, float(found["truncated_mass"].max()))

    def mean(self, k: str) -> float:
        return self.sums[k] / self.positions if self.positions else 0.0

    def recommendation(self) -> tuple[str | None, str]:
        """(estimator, why)."""
        if not self.positions:
            return None, "no sampled position with a known sampler"
        if self.pure:
            return "k3", (
                "pure sampling: k1 and k3 average to the KL exactly; k3 is >= 0 per token (lower variance), k2 is "
                "biased"
            )
        if not self.with_reference:
            return None, (
                f"the sampler never draws {self.mean('truncated_mass'):.2%} of the policy's mass on average: every "
                "estimator is biased; give --ref for the size of each bias"
            )
        kl = self.mean("kl")
        bias = {k: self.mean(f"e_{k}") - kl for k in ("k1", "k2", "k3")}
        best = min(bias, key=lambda k: (abs(bias[k]), k))
        rel = abs(bias[best]) / kl if kl > 0 else float("inf") if bias[best] else 0.0
        if rel > RELATIVE_BIAS:
            return best, (
                f"{best} has the smallest bias ({bias[best]:+.3g}, {rel:.0%} of the KL {kl:.3g}), still over "
                f"{RELATIVE_BIAS:.0%}: sample purely (temperature 1, no top-k/top-p, no minimum length) or compute the "
                "KL from the full distributions"
            )
        return best, f"{best} has the smallest exact bias under this sampler ({bias[best]:+.3g}, {rel:.1%} of the KL)"

    def to_dict(self) -> dict[str, Any]:
        best, why = self.recommendation()
        out: dict[str, Any] = {
            "positions": self.positions,
            "sampling": dict(sorted(self.settings.items())),
            "source": dict(sorted(self.sources.items())),
            "pure": self.pure if self.positions else None,
            "reference": self.with_reference,
            "unknown_episodes": self.unknown,
            "refused_episodes": self.refused,
            "conflicts": [
                {"sampling_option": cli, "log": logged, "episodes": n, "first": self.conflict_first[(cli, logged)]}
                for (cli, logged), n in sorted(self.conflicts.items())
            ],
            "truncated_mass": self.mean("truncated_mass") if self.positions else None,
            "truncated_mass_max": self.truncated_max if self.positions else None,
            "recommended": best,
            "why": why,
        }
        if self.positions and self.with_reference:
            kl = self.mean("kl")
            out["kl"] = kl
            for k in ("k1", "k2", "k3"):
                out[f"expected_{k}"] = self.mean(f"e_{k}")
                out[f"bias_{k}"] = self.mean(f"e_{k}") - kl
        return out
