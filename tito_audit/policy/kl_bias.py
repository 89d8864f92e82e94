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

from tito_audit.policy.clamps import K3_CLAMP, LOG_RATIO_CLAMP
from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.gradients import SOFTMAX_CHUNK_ELEMENTS
from tito_audit.policy.model import VocabMap, stop_model_ids
from tito_audit.policy.sampler_distribution import mask_padding, process_logits

FIELDS = ("kl", "e_k1", "e_k2", "e_k3", "truncated_mass")

__all__ = [
    "FIELDS",
    "K3_CLAMP",
    "LOG_RATIO_CLAMP",
    "blocked_ids",
    "estimator_expectations",
    "position_expectations",
    "processed_logps",
]


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


@torch.no_grad()
def position_expectations(
    logits: torch.Tensor,
    logits_ref: torch.Tensor | None,
    settings: GenerationSettings,
    steps: Sequence[int],
    prompts: Sequence[int],
    vmap: VocabMap,
    stop_ids: Sequence[int],
) -> dict[str, torch.Tensor]:
    """Per position (float64, host): ``kl_bias.FIELDS``. ``steps[i]``: ids of its turn before it; ``prompts[i]``:
    the length of what the turn continued (for ``min_length``). Without a reference only the truncated mass means
    anything (the others are computed against the policy itself: 0)."""
    suppress = torch.tensor([s < settings.min_new(p) for s, p in zip(steps, prompts, strict=True)])
    stops = stop_model_ids(vmap, stop_ids)
    never = [vmap.unk] if vmap.unk is not None else []
    blocked = blocked_ids(settings, vmap, logits.shape[-1], logits.device)
    rows = max(1, SOFTMAX_CHUNK_ELEMENTS // 4 // max(1, logits.shape[-1]))
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in FIELDS}
    for i in range(0, logits.shape[0], rows):
        sl = slice(i, i + rows)
        lg = logits[sl]
        lr = logits_ref[sl].to(lg.device) if logits_ref is not None else lg
        found = estimator_expectations(lg, lr, settings, suppress[sl].to(lg.device), stops, never, vmap.valid, blocked)
        for k in FIELDS:
            parts[k].append(found[k].cpu())
    return {k: torch.cat(v) if v else torch.zeros(0, dtype=torch.float64) for k, v in parts.items()}


def blocked_ids(settings: GenerationSettings, vmap: VocabMap, width: int, device: torch.device) -> torch.Tensor | None:
    """[width] bool, True at the model ids the settings forbid (outside ``allowed_token_ids``, single-token bad
    words); None when they forbid nothing. A forbidden id the compacted vocabulary lacks was never drawable."""
    if settings.allowed_token_ids is None and not settings.banned_token_ids:
        return None
    size = vmap.valid if vmap.valid is not None else width

    def rows(ids: Sequence[int]) -> list[int]:
        known = [i for i in ids if 0 <= i < size] if vmap.model_to_tok is None else list(ids)
        return [m for m in vmap.to_model(known) if m != vmap.unk and 0 <= m < width]

    blocked = torch.zeros(width, dtype=torch.bool, device=device)
    if settings.allowed_token_ids is not None:
        blocked[:] = True
        blocked[rows(settings.allowed_token_ids)] = False
    blocked[rows(settings.banned_token_ids)] = True
    return blocked


@torch.no_grad()
def processed_logps(
    logits: torch.Tensor,
    tokens: Sequence[int],
    settings: GenerationSettings,
    steps: Sequence[int],
    prompts: Sequence[int],
    vmap: VocabMap,
    stop_ids: Sequence[int],
) -> torch.Tensor:
    """Per position (float64, host): log q(token), q the sampler's processed distribution at that position (what an
    engine logs in its processed-log-probs mode); -inf where q never draws the token. ``tokens``: model ids."""
    suppress = torch.tensor([s < settings.min_new(p) for s, p in zip(steps, prompts, strict=True)])
    stops = stop_model_ids(vmap, stop_ids)
    never = [vmap.unk] if vmap.unk is not None else []
    blocked = blocked_ids(settings, vmap, logits.shape[-1], logits.device)
    y = torch.tensor(list(tokens), device=logits.device)
    rows = max(1, SOFTMAX_CHUNK_ELEMENTS // 4 // max(1, logits.shape[-1]))
    parts = []
    for i in range(0, logits.shape[0], rows):
        sl = slice(i, i + rows)
        x = mask_padding(logits[sl].double(), vmap.valid)
        q = torch.log_softmax(process_logits(x, settings, suppress[sl].to(x.device), stops, never, blocked), -1)
        parts.append(q.gather(1, y[sl, None])[:, 0].cpu())
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
