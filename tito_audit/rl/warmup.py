"""Supervised warm-up: a few steps of next-token training on the buffered scenario conversations, so that the
small model's own samples (and the probability diagnostics on them) mean something."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from tito_audit.policy.gradients import token_logps
from tito_audit.policy.model import VocabMap
from tito_audit.policy.view import View


def warmup(
    model: Any,
    vmap: VocabMap,
    views: Sequence[View],
    steps: int,
    lr: float = 3e-3,
    batch: int = 4,
    seed: int = 0,
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """``steps`` Adam steps on the mean NLL of the trained (assistant) tokens; returns the loss per step."""
    if steps <= 0 or not views:
        return []
    rng = random.Random(seed)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    order: list[int] = []
    for step in range(steps):
        if len(order) < batch:
            order += rng.sample(range(len(views)), len(views))
        chosen, order = order[:batch], order[batch:]
        opt.zero_grad(set_to_none=True)
        total = sum(views[i].n_trained for i in chosen) or 1
        loss_v = 0.0
        for i in chosen:
            logp, _ = token_logps(model, vmap, views[i])
            loss = -logp.sum() / total
            loss.backward()
            loss_v += float(loss.detach())
        opt.step()
        losses.append(loss_v)
        if on_step:
            on_step(step, loss_v)
    model.eval()
    return losses
