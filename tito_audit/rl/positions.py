"""What the policy and the reference say at every trained position of a view (one no-grad forward of each).

Per position: log p of the token under both, the exact KL(pi || pi_ref), the reference's entropy (for the
certainty of critical tokens), sum_v pi(v)^2 (for the logit-space gradient norm ||e_y - pi||), and what each
KL estimator averages to under the user's sampler (``kl_bias``). The sampler's processing depends on where the
position lies in its turn (the minimum length counts from the turn's start, ``min_length`` also counts the
prompt), which the view's turns give. Rows are reduced in float64 chunks; only per-position numbers are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.gradients import SOFTMAX_CHUNK_ELEMENTS, position_logits, trained_positions
from tito_audit.policy.kl_bias import position_expectations
from tito_audit.policy.model import VocabMap
from tito_audit.policy.sampler_distribution import mask_padding
from tito_audit.policy.view import View, turn_offsets


@dataclass
class PositionStats:
    positions: list[int]
    logp: torch.Tensor  # policy log p(y_t), float64 on the host
    logp_ref: torch.Tensor
    kl_exact: torch.Tensor
    entropy_ref: torch.Tensor
    sum_p2: torch.Tensor  # sum_v pi(v)^2
    expectations: dict[str, torch.Tensor]  # kl_bias.estimator_expectations per position

    @property
    def p(self) -> torch.Tensor:
        return self.logp.exp()

    @property
    def logit_gradient_norm(self) -> torch.Tensor:
        """||e_y - pi||_2 = sqrt(1 - 2 p_y + sum_v pi(v)^2): the norm of d log p(y) / d logits."""
        return (1.0 - 2.0 * self.p + self.sum_p2).clamp_min(0.0).sqrt()


@torch.no_grad()
def position_stats(
    policy: object,
    ref: object,
    vmap: VocabMap,
    view: View,
    settings: GenerationSettings | None = None,
    stop_ids: Sequence[int] = (),
) -> PositionStats:
    positions = trained_positions(view.mask)
    if not positions:
        z = torch.zeros(0, dtype=torch.float64)
        return PositionStats(positions, z, z, z, z, z, {})
    settings = settings or GenerationSettings()
    lg = position_logits(policy, vmap, view, positions)
    lr = position_logits(ref, vmap, view, positions).to(lg.device)
    y = torch.tensor(vmap.to_model([view.ids[t] for t in positions]), device=lg.device)
    steps, prompts = turn_offsets(view.turns, positions)
    parts: dict[str, list[torch.Tensor]] = {}
    rows = max(1, SOFTMAX_CHUNK_ELEMENTS // 4 // lg.shape[-1])
    for i in range(0, len(positions), rows):
        sl = slice(i, i + rows)
        lp = torch.log_softmax(mask_padding(lg[sl].double(), vmap.valid), -1)
        lq = torch.log_softmax(mask_padding(lr[sl].double(), vmap.valid), -1)
        pi, pr = lp.exp(), lq.exp()
        found = {
            "logp": lp.gather(1, y[sl, None])[:, 0],
            "logp_ref": lq.gather(1, y[sl, None])[:, 0],
            "entropy_ref": -torch.where(pr > 0, pr * lq, torch.zeros_like(pr)).sum(-1),
            "sum_p2": (pi * pi).sum(-1),
        }
        for k, v in found.items():
            parts.setdefault(k, []).append(v.cpu())
    cat = {k: torch.cat(v) for k, v in parts.items()}
    expectations = position_expectations(lg, lr, settings, steps, prompts, vmap, stop_ids)
    return PositionStats(
        positions, cat["logp"], cat["logp_ref"], expectations["kl"], cat["entropy_ref"], cat["sum_p2"], expectations
    )
