"""What each KL estimator averages to under the user's sampler, exactly, at one position.

A trainer estimates KL(pi || pi_ref) from sampled tokens x with r = pi_ref(x) / pi(x): k1 = -log r,
k2 = (log r)^2 / 2, k3 = r - 1 - log r. It assumes x ~ pi. A sampler with temperature, top-k, top-p or a minimum
length draws x ~ q instead, so the token mean of k converges to E_q[k], not to KL. With the full logits of the
policy, the reference and q at a position, both are sums over the vocabulary, with no sampling noise:

    KL      = sum_v pi(v) log(pi(v) / pi_ref(v))
    E_q[k]  = sum_v q(v) k(v)          bias = E_q[k] - KL
    truncated mass = sum of pi(v) over the tokens q never draws

Under pure sampling (q = pi) E_q[k1] = E_q[k3] = KL exactly and k2 alone is biased. The estimators carry the
trainer's clamps (``kl.estimators``), so E_q[k] is what the clamped estimator averages to.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.sampler_distribution import mask_padding, process_logits

FIELDS = ("kl", "e_k1", "e_k2", "e_k3", "truncated_mass")

LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios to +-20
K3_CLAMP = 10.0  # and k3 to [-10, 10]; unclamped k3 overflowed to ~1e29 on a peaky output layer


def estimator_expectations(
    logits: torch.Tensor,
    logits_ref: torch.Tensor,
    settings: GenerationSettings,
    suppress_stop: torch.Tensor | None = None,
    stop_ids: Sequence[int] = (),
    never: Sequence[int] = (),
    valid: int | None = None,
    blocked: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Per row (float64): the exact KL(pi || pi_ref), E_q[k1], E_q[k2], E_q[k3] and the mass of pi outside q's
    support, q being what ``settings`` make of pi (``sampler_distribution.process_logits``)."""
    x = mask_padding(logits.double(), valid)
    lp = torch.log_softmax(x, -1)
    lr = torch.log_softmax(mask_padding(logits_ref.double(), valid), -1)
    pi = lp.exp()
    kl = torch.where(pi > 0, pi * (lp - lr), 0.0).sum(-1)
    q = process_logits(x, settings, suppress_stop, stop_ids, never, blocked).softmax(-1)
    support = q > 0
    # The estimators of ``kl.estimators`` (same clamps), over q's support only: 0 elsewhere, where q is 0 too.
    # Written with scalar fills and in-place steps: at 150k columns in float64 each temporary is 1.2 MB a row.
    log_r = torch.where(support, lr - lp, 0.0).clamp_(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    q_log_r = q * log_r
    out = {"kl": kl.clamp_min(0.0)}
    out["e_k1"] = -q_log_r.sum(-1)
    out["e_k2"] = 0.5 * (q_log_r * log_r).sum(-1)
    out["e_k3"] = (q * (log_r.exp().sub_(1).sub_(log_r)).clamp_(-K3_CLAMP, K3_CLAMP)).sum(-1)
    out["truncated_mass"] = torch.where(support, 0.0, pi).sum(-1)
    return out
