"""KL to a reference: Schulman's k1/k2/k3 estimators on the sampled tokens, the exact per-position KL from the
full distributions, and (``kl_bias``) what each estimator averages to under the user's sampler.

With x sampled and r = pi_ref(x) / pi_theta(x):
k1 = -log r (unbiased under pure sampling, can be negative per sample), k2 = (log r)^2 / 2, k3 = r - 1 - log r
(>= 0 per token); exact = sum_v pi_theta(v) log(pi_theta(v) / pi_ref(v)) at each position (>= 0, no sampling
noise). Standard errors treat sequences as clusters; a mean is significantly negative when its one-sided 97.5 %
bound with Student's t quantile (S - 1 degrees of freedom) is below 0 (``stats``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tito_audit.policy.clamps import K3_CLAMP, LOG_RATIO_CLAMP
from tito_audit.rl.stats import CONFIDENCE, clustered_mean, student_t_quantile, upper_bound

NONPURE_EXPLANATION = (
    "significant negative k1 (mean + t(0.975, S-1) SE < 0) with non-pure sampling ({settings}): the samples are "
    "tokens the policy rates lower than the reference. With reward R = r - beta*KL a negative KL is free reward, so "
    "the policy learns to exploit it. Sample with top_k=0, top_p=1, temperature=1, no min_new_tokens."
)
PURE_EXPLANATION = (
    "significant negative k1 (mean + t(0.975, S-1) SE < 0) although sampling was pure: the sampler's distribution "
    "is not the policy's (precision, a stale sampler, a different head); compare sampler and trainer log-probs."
)


def estimators(logp: torch.Tensor, logp_ref: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-token k1, k2, k3 (float64), with the trainer's clamps."""
    log_r = (logp_ref.double() - logp.double()).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    k3 = (log_r.exp() - 1 - log_r).clamp(-K3_CLAMP, K3_CLAMP)
    return {"k1": -log_r, "k2": 0.5 * log_r * log_r, "k3": k3}


def exact_kl(logits: torch.Tensor, logits_ref: torch.Tensor) -> torch.Tensor:
    """KL(pi_theta || pi_ref) at each position from the full logits (float64)."""
    lp, lq = torch.log_softmax(logits.double(), -1), torch.log_softmax(logits_ref.double(), -1)
    return (lp.exp() * (lp - lq)).sum(-1).clamp_min(0.0)


def kl_summary(
    per_seq_logp: Sequence[torch.Tensor],
    per_seq_ref: Sequence[torch.Tensor],
    per_seq_exact: Sequence[torch.Tensor] | None = None,
    *,
    expectations: Sequence[Mapping[str, torch.Tensor]] | None = None,
    pure: bool = True,
    settings: str = "",
) -> dict[str, Any]:
    """Token means with standard errors of k1/k2/k3 (and the exact KL); with ``expectations`` (per sequence,
    ``kl_bias.estimator_expectations`` at its positions) the exact bias of each estimator under the sampler.
    A warning only when k1 < 0 is significant."""
    tokens: dict[str, list[torch.Tensor]] = {"k1": [], "k2": [], "k3": []}
    for lp, ref in zip(per_seq_logp, per_seq_ref, strict=True):
        for k, v in estimators(lp, ref).items():
            tokens[k].append(v)
    if per_seq_exact is not None:
        tokens["exact"] = [e.double() for e in per_seq_exact]
    out: dict[str, Any] = {"tokens": sum(int(v.numel()) for v in tokens["k1"]), "sequences": len(tokens["k1"])}
    df = 0
    for k, vals in tokens.items():
        mean, se, df = clustered_mean(vals)
        out[f"{k}_mean"], out[f"{k}_se"] = mean, se
        out[f"{k}_seq_sums"] = [float(v.sum()) for v in vals]
    out["degrees_of_freedom"] = df
    out["t_quantile"] = student_t_quantile(CONFIDENCE, df) if df >= 1 else None
    bound = upper_bound(out["k1_mean"], out["k1_se"], df)
    out["k1_upper_bound"] = bound
    out["negative_kl"] = bound is not None and bound < 0
    out["significance"] = (
        f"one-sided {CONFIDENCE:.1%} with t({df})" if df >= 1 else "none: one sequence has no degree of freedom"
    )
    out["sampling_pure"] = pure
    if expectations is not None:
        out["bias"] = sampler_bias(expectations)
    if out["negative_kl"]:
        out["warning"] = PURE_EXPLANATION if pure else NONPURE_EXPLANATION.format(settings=settings)
    return out


def sampler_bias(expectations: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, Any]:
    """Position means over every visited position: the exact KL, E_q[k] and E_q[k] - KL per estimator, and the
    truncated mass (float64; exact, no standard error)."""
    cat = {
        k: torch.cat([e[k].double() for e in expectations]) if expectations else torch.zeros(0, dtype=torch.float64)
        for k in ("kl", "e_k1", "e_k2", "e_k3", "truncated_mass")
    }
    n = int(cat["kl"].numel())
    if not n:
        return {"positions": 0}
    kl = float(cat["kl"].mean())
    out: dict[str, Any] = {"positions": n, "kl": kl, "truncated_mass": float(cat["truncated_mass"].mean())}
    for k in ("k1", "k2", "k3"):
        e = float(cat[f"e_{k}"].mean())
        out[f"expected_{k}"] = e
        out[f"bias_{k}"] = e - kl
    out["truncated_mass_max"] = float(cat["truncated_mass"].max())
    return out
