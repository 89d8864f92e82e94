"""Do low-probability tokens get the larger updates (Yang et al. 2025, seed 004)? Measured per token.

The gradient of log p(y) with respect to the logits is e_y - pi, so a token's update on the logits is
|A| * ||e_y - pi||_2, which lies in [(1 - p_y) sqrt(N / (N - 1)), sqrt(2) (1 - p_y)] (``positions`` computes
||e_y - pi|| exactly from the full distribution). That per-token norm is reported, not the norm of a group's
summed parameter gradient: in GRPO, copies of one token at one shared prefix with advantages of opposite sign
cancel in the sum (six copies with +-0.577 gave a "low-p" group norm of 2.6e-7), which measures the cancellation,
not how hard each token is pushed.

So positions are de-duplicated on (prefix, token) within each advantage sign (the copies a group shares count
once), and tokens with A > 0 and A < 0 are reported apart. Quartiles are ranks of p among those positions and are
labelled by the p range they actually hold (on a confident policy every quartile may lie above p = 0.99).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.policy.view import View
from tito_audit.rl.positions import PositionStats


@dataclass(frozen=True)
class TokenRecord:
    key: bytes  # digest of the ids up to and including the token: the same (prefix, token) has the same key
    p: float
    grad_norm: float  # ||e_y - pi||_2
    advantage: float


def prefix_key(ids: Sequence[int], t: int) -> bytes:
    return hashlib.blake2b(b",".join(str(i).encode() for i in ids[: t + 1]), digest_size=16).digest()


def token_records(
    views: Sequence[View], stats: Sequence[PositionStats], advantages: Sequence[float]
) -> list[TokenRecord]:
    out = []
    for v, s, a in zip(views, stats, advantages, strict=True):
        norms = s.logit_gradient_norm
        for i, t in enumerate(s.positions):
            out.append(TokenRecord(prefix_key(v.ids, t), float(s.p[i]), float(norms[i]), float(a)))
    return out


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _quartiles(records: Sequence[TokenRecord]) -> list[dict[str, Any]]:
    ranked = sorted(records, key=lambda r: r.p)
    n = len(ranked)
    out = []
    for q in range(4):
        part = ranked[q * n // 4 : (q + 1) * n // 4]
        if not part:
            continue
        out.append(
            {
                "quartile": q + 1,
                "p_min": part[0].p,
                "p_max": part[-1].p,
                "tokens": len(part),
                "mean_grad_norm": _mean([r.grad_norm for r in part]),
            }
        )
    return out


def _side(records: Sequence[TokenRecord], eta: float) -> dict[str, Any]:
    unique = list({r.key: r for r in records}.values())
    low = [r.grad_norm for r in unique if r.p < eta]
    high = [r.grad_norm for r in unique if r.p >= eta]
    low_mean, high_mean = _mean(low), _mean(high)
    return {
        "tokens": len(records),
        "unique_positions": len(unique),
        "low_positions": len(low),
        "high_positions": len(high),
        "mean_grad_norm_low": low_mean,
        "mean_grad_norm_high": high_mean,
        "low_over_high": low_mean / high_mean if low_mean is not None and high_mean else None,
        "quartiles": _quartiles(unique),
    }


def low_probability_figure(records: Sequence[TokenRecord], eta: float = 0.5) -> dict[str, Any]:
    """Per advantage sign: the de-duplicated positions' mean ||e_y - pi|| for p < eta and p >= eta, and per p
    quartile with its real range. Tokens with A = 0 get no update and are left out (counted)."""
    positive = [r for r in records if r.advantage > 0]
    negative = [r for r in records if r.advantage < 0]
    return {
        "measure": "logit-space gradient norm ||e_y - pi||_2 per token, (prefix, token) de-duplicated per sign",
        "eta": eta,
        "tokens": len(records),
        "zero_advantage_tokens": len(records) - len(positive) - len(negative),
        "low_fraction": sum(r.p < eta for r in records) / len(records) if records else None,
        "positive": _side(positive, eta),
        "negative": _side(negative, eta),
    }
