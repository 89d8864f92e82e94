"""KL to a frozen reference: Schulman's k1/k2/k3 estimators on the sampled tokens and the exact per-position
KL from the full distributions, each with a standard error.

With x ~ pi_theta and r = pi_ref(x) / pi_theta(x):
k1 = -log r (unbiased, can be negative per sample), k2 = (log r)^2 / 2, k3 = r - 1 - log r (>= 0 per token);
exact = sum_v pi_theta(v) log(pi_theta(v) / pi_ref(v)) at each position (>= 0, no sampling noise in the token).
Standard errors treat sequences as clusters (tokens of one sequence are not independent).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios to +-20
K3_CLAMP = 10.0  # and k3 to [-10, 10]; unclamped k3 overflowed to ~1e29 on a peaky output layer

NONPURE_EXPLANATION = (
    "significant negative k1 (mean + 2 SE < 0) with non-pure sampling ({settings}): the samples are tokens the "
    "policy rates lower than the reference. With reward R = r - beta*KL a negative KL is free reward, so the "
    "policy learns to exploit it. Sample with top_k=0, top_p=1, temperature=1, no min_new_tokens."
)
PURE_EXPLANATION = (
    "significant negative k1 (mean + 2 SE < 0) although sampling was pure: the sampler's distribution is not the "
    "policy's (precision, a stale sampler, a different head); compare sampler and trainer log-probs."
)


def estimators(logp: torch.Tensor, logp_ref: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token k1, k2, k3 (float64)."""
    log_r = (logp_ref.double() - logp.double()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    k3 = (log_r.exp() - 1 - log_r).clamp(-K3_CLAMP, K3_CLAMP)
    return {"k1": -log_r, "k2": 0.5 * log_r * log_r, "k3": k3}


def exact_kl(logits: torch.Tensor, logits_ref: torch.Tensor) -> torch.Tensor:
    """KL(pi_theta || pi_ref) at each position from the full logits (float64)."""
    lp, lq = torch.log_softmax(logits.double(), -1), torch.log_softmax(logits_ref.double(), -1)
    return (lp.exp() * (lp - lq)).sum(-1).clamp_min(0.0)


def clustered_mean(per_seq: Sequence[torch.Tensor]) -> tuple[float, float]:
    """Token mean and its standard error with sequences as clusters (iid tokens when only one sequence)."""
    vals = [v.double() for v in per_seq if v.numel()]
    if not vals:
        return 0.0, 0.0
    allv = torch.cat(vals)
    n, mean = allv.numel(), float(allv.mean())
    if len(vals) < 2:
        return mean, float(allv.std(unbiased=True) / n**0.5) if n > 1 else 0.0
    s = len(vals)
    resid = torch.tensor([float((v - mean).sum()) for v in vals], dtype=torch.float64)
    return mean, float((resid.pow(2).sum() * s / (s - 1)) ** 0.5 / n)


def kl_summary(
    per_seq_logp: Sequence[torch.Tensor],
    per_seq_ref: Sequence[torch.Tensor],
    per_seq_exact: Sequence[torch.Tensor] | None = None,
    *,
    pure: bool = True,
    settings: str = "",
) -> dict[str, Any]:
    """Token means with standard errors of k1/k2/k3 (and the exact KL); a warning only when k1 < 0 is significant."""
    tokens: dict[str, list[torch.Tensor]] = {"k1": [], "k2": [], "k3": []}
    for lp, ref in zip(per_seq_logp, per_seq_ref, strict=True):
        for k, v in estimators(lp, ref).items():
            tokens[k].append(v)
    if per_seq_exact is not None:
        tokens["exact"] = [e.double() for e in per_seq_exact]
    out: dict[str, Any] = {"tokens": sum(int(v.numel()) for v in tokens["k1"]), "sequences": len(tokens["k1"])}
    for k, vals in tokens.items():
        mean, se = clustered_mean(vals)
        out[f"{k}_mean"], out[f"{k}_se"] = mean, se
        out[f"{k}_seq_sums"] = [float(v.sum()) for v in vals]
    out["negative_kl"] = out["k1_mean"] + 2 * out["k1_se"] < 0
    out["sampling_pure"] = pure
    if out["negative_kl"]:
        out["warning"] = PURE_EXPLANATION if pure else NONPURE_EXPLANATION.format(settings=settings)
    return out
