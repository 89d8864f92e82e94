"""Per-token log-probabilities at trained positions and the policy gradient of one view.

Logits come from the model's own forward (``logits_to_keep`` = the positions before trained tokens), so its own
head, soft-capping (Gemma-2) and logit scaling (Cohere, Granite) apply, and the output layer runs only where a
token is trained. Gradients stay on the model's device, one tensor per parameter; comparisons are per-parameter
float64 dot products summed on the host as Python floats, never a flat host copy of the whole gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tito_audit.rl.episodes import View
from tito_audit.rl.model import VocabMap


@dataclass
class TokenStats:
    """Detached per-token log p at the trained positions of one sequence (in sequence order)."""

    positions: list[int]
    logp: torch.Tensor  # log p(y_t | y_<t), float64 on the host


def trained_positions(mask: Sequence[int]) -> list[int]:
    return [t for t, m in enumerate(mask) if m and t > 0]


def position_logits(model: Any, vmap: VocabMap, view: View, positions: Sequence[int]) -> torch.Tensor:
    """Float32 logits predicting ``view.ids[t]`` for each t in ``positions`` (the model's own head)."""
    device = next(model.parameters()).device
    ids = torch.tensor([vmap.to_model(view.ids)], device=device)
    keep = torch.tensor([t - 1 for t in positions], device=device, dtype=torch.long)
    out = model(input_ids=ids, logits_to_keep=keep, use_cache=False)
    return out.logits[0].float()


def token_logps(model: Any, vmap: VocabMap, view: View, *, grad: bool = True) -> tuple[torch.Tensor, TokenStats]:
    """log p of each trained token of ``view`` (differentiable when ``grad``), and a detached copy."""
    device = next(model.parameters()).device
    positions = trained_positions(view.mask)
    if not positions:
        empty = torch.zeros(0, device=device)
        return empty, TokenStats(positions, torch.zeros(0, dtype=torch.float64))
    with torch.set_grad_enabled(grad):
        logits = position_logits(model, vmap, view, positions)
        y = torch.tensor(vmap.to_model([view.ids[t] for t in positions]), device=device)
        logp = logits.gather(1, y[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)
    return logp, TokenStats(positions, logp.detach().double().cpu())


Grads = list[torch.Tensor]  # one tensor per trainable parameter, on the model's device


@dataclass
class ViewGradient:
    grads: Grads
    tokens: list[TokenStats]  # per episode
    loss: float


def current_grads(model: Any) -> Grads:
    return [
        (p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p))
        for p in model.parameters()
        if p.requires_grad
    ]


def surrogate_backward(
    model: Any,
    vmap: VocabMap,
    views: Sequence[View],
    advantages: Sequence[float],
    token_weights: Sequence[torch.Tensor | None] | None = None,
) -> tuple[list[TokenStats], float]:
    """Accumulate the gradient of -sum_t w_t A_i log p(y_t) / (trained tokens of all views) into ``.grad``.

    ``token_weights`` (per view, per trained token; None = 1) select or reweight tokens: 0/1 masks give the
    per-group gradients of Lopti, [alpha p + 1 - alpha] gives Advantage Reweighting.
    """
    total = sum(v.n_trained for v in views) or 1
    loss_sum = 0.0
    tokens: list[TokenStats] = []
    for n, (view, adv) in enumerate(zip(views, advantages, strict=True)):
        w = token_weights[n] if token_weights is not None else None
        active = adv != 0.0 and (w is None or bool((w != 0).any()))
        logp, st = token_logps(model, vmap, view, grad=active)
        tokens.append(st)
        if active and logp.numel():
            scale = adv * (w.to(logp.device, logp.dtype) if w is not None else 1.0)
            loss = -(scale * logp.float()).sum() / total
            loss.backward()
            loss_sum += float(loss.detach())
    return tokens, loss_sum


def view_gradient(
    model: Any,
    vmap: VocabMap,
    views: Sequence[View],
    advantages: Sequence[float],
    token_weights: Sequence[torch.Tensor | None] | None = None,
) -> ViewGradient:
    """Gradient of the GRPO surrogate -sum_t A_i * log p(y_t) / (trained tokens of this view).

    On-policy, the ratio pi/pi_old is 1 and its gradient is that of log p, so this is the first step of GRPO.
    Each view is normalised by its own trained-token count, as the code that built it would do. ``.grad``
    holds this gradient afterwards (the optimiser steps with it).
    """
    model.zero_grad(set_to_none=True)
    tokens, loss = surrogate_backward(model, vmap, views, advantages, token_weights)
    return ViewGradient(current_grads(model), tokens, loss)


def dot(a: Grads, b: Grads) -> float:
    return sum(float((x.double() * y.double()).sum()) for x, y in zip(a, b, strict=True))


def norm(a: Grads) -> float:
    return dot(a, a) ** 0.5


def diff_norm(a: Grads, b: Grads) -> float:
    return sum(float(((x.double() - y.double()) ** 2).sum()) for x, y in zip(a, b, strict=True)) ** 0.5


def compare(gb: Grads, gr: Grads) -> dict[str, Any]:
    """Cosine similarity and relative L2 error ||g_R - g_B|| / ||g_B||, per-parameter float64 sums."""
    nb, nr = norm(gb), norm(gr)
    bitwise = all(torch.equal(x, y) for x, y in zip(gb, gr, strict=True))
    if nb == 0.0:
        return {"cosine": None, "rel_error": None, "norm_b": nb, "norm_r": nr, "bitwise_equal": bitwise}
    if bitwise:
        return {"cosine": 1.0, "rel_error": 0.0, "norm_b": nb, "norm_r": nr, "bitwise_equal": True}
    cos = dot(gb, gr) / (nb * nr) if nr > 0 else 0.0
    return {"cosine": cos, "rel_error": diff_norm(gr, gb) / nb, "norm_b": nb, "norm_r": nr, "bitwise_equal": False}
