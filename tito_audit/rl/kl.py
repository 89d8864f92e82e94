"""KL estimators to a frozen reference (Schulman's note), with the clamps frameworks apply.

With x ~ pi_theta and r = pi_ref(x) / pi_theta(x):
k1 = -log r (unbiased, can be negative per sample), k2 = (log r)^2 / 2, k3 = r - 1 - log r (>= 0 per token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios to +-20
K3_CLAMP = 10.0  # and k3 to [-10, 10]; unclamped k3 overflowed to ~1e29 on a peaky output layer

NEGATIVE_KL_EXPLANATION = (
    "mean k1 < 0: the samples are tokens the policy rates lower than the reference. Usual cause: sampling "
    "that is not pure (top-k, top-p, min_length/EOS suppression, temperature != 1). With reward "
    "R = r - beta*KL a negative KL is free reward, so the policy learns to exploit it. "
    "Sample with top_k=0, top_p=1, "
    "temperature=1, no min_length."
)


def estimators(logp: torch.Tensor, logp_ref: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token k1, k2, k3 (float64)."""
    log_r = (logp_ref.double() - logp.double()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    k3 = (log_r.exp() - 1 - log_r).clamp(-K3_CLAMP, K3_CLAMP)
    return {"k1": -log_r, "k2": 0.5 * log_r * log_r, "k3": k3}


def kl_summary(per_seq_logp: Sequence[torch.Tensor], per_seq_ref: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Token means and per-sequence sums of k1/k2/k3 over a batch."""
    sums: dict[str, list[float]] = {"k1": [], "k2": [], "k3": []}
    tokens: dict[str, list[torch.Tensor]] = {"k1": [], "k2": [], "k3": []}
    for lp, ref in zip(per_seq_logp, per_seq_ref, strict=True):
        ks = estimators(lp, ref)
        for k, v in ks.items():
            sums[k].append(float(v.sum()))
            tokens[k].append(v)
    out: dict[str, Any] = {}
    for k in sums:
        allv = torch.cat(tokens[k]) if tokens[k] else torch.zeros(0, dtype=torch.float64)
        out[f"{k}_token_mean"] = float(allv.mean()) if allv.numel() else 0.0
        out[f"{k}_seq_sum_mean"] = sum(sums[k]) / len(sums[k]) if sums[k] else 0.0
        out[f"{k}_seq_sums"] = sums[k]
    out["negative_kl"] = out["k1_token_mean"] < 0
    return out
