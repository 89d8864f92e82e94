"""Per-token log-probabilities at trained positions and gradient passes of the GRPO surrogate over views.

Logits come from the model's own forward (``logits_to_keep`` = the positions before trained tokens), so its own
head, soft-capping (Gemma-2) and logit scaling (Cohere, Granite) apply, and the output layer runs only where a
token is trained. The log-softmax over the vocabulary runs in row chunks in float32 (``gather_log_softmax``): no
float copy of the whole logits matrix is kept for the backward pass, which recomputes the softmax chunk by chunk.

A pass (``surrogate_pass``) forwards and backwards one view at a time, so that one view's activations are alive
at once and each parameter's gradient accumulates in place in ``.grad``. (Holding several views' graphs for one
backward would not save the accumulated gradient: autograd keeps each parameter's first contribution in its input
buffer until the other graphs reach it, which is a full gradient as well.) ``gradient_compare`` compares two passes
parameter by parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tito_audit.policy.gradient_compare import GradientPass, clear_grads, trainable
from tito_audit.policy.model import VocabMap
from tito_audit.policy.view import View

SOFTMAX_CHUNK_ELEMENTS = 1 << 24  # rows x vocabulary per float32 chunk (64 MB)


@dataclass
class TokenStats:
    """Detached per-token log p at the trained positions of one sequence (in sequence order)."""

    positions: list[int]
    logp: torch.Tensor  # log p(y_t | y_<t), float64 on the host


def trained_positions(mask: Sequence[int]) -> list[int]:
    return [t for t, m in enumerate(mask) if m and t > 0]


def chunk_rows(vocab: int) -> int:
    return max(1, SOFTMAX_CHUNK_ELEMENTS // max(1, vocab))


class _GatherLogSoftmax(torch.autograd.Function):
    """log_softmax(logits)[y] per row, float32, chunked; saves only the logits and the row log-normalisers."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        rows = chunk_rows(logits.shape[-1])
        lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for i in range(0, logits.shape[0], rows):
            lse[i : i + rows] = torch.logsumexp(logits[i : i + rows].float(), -1)
        ctx.save_for_backward(logits, y, lse)
        return logits.gather(1, y[:, None])[:, 0].float() - lse

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, y, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        rows = chunk_rows(logits.shape[-1])
        for i in range(0, logits.shape[0], rows):
            g = grad_out[i : i + rows, None].float()
            part = -(logits[i : i + rows].float() - lse[i : i + rows, None]).exp() * g
            part.scatter_add_(1, y[i : i + rows, None], g)
            grad[i : i + rows] = part.to(grad.dtype)
        return grad, None


def gather_log_softmax(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """float32 log p(y_i) of each row of ``logits`` (any float dtype), differentiable, in row chunks."""
    return _GatherLogSoftmax.apply(logits, y)


def position_logits(model: Any, vmap: VocabMap, view: View, positions: Sequence[int]) -> torch.Tensor:
    """Logits (the model's dtype) predicting ``view.ids[t]`` for each t in ``positions`` (the model's own head)."""
    device = next(model.parameters()).device
    ids = torch.tensor([vmap.to_model(view.ids)], device=device)
    keep = torch.tensor([t - 1 for t in positions], device=device, dtype=torch.long)
    out = model(input_ids=ids, logits_to_keep=keep, use_cache=False)
    return out.logits[0]


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
        logp = gather_log_softmax(logits, y)
    return logp, TokenStats(positions, logp.detach().double().cpu())


def surrogate_pass(
    model: Any,
    vmap: VocabMap,
    views: Sequence[View],
    advantages: Sequence[float],
    token_weights: Sequence[torch.Tensor | None] | None = None,
    *,
    tokens_out: list[TokenStats] | None = None,
) -> GradientPass:
    """The gradient of -sum_i sum_t w_t A_i log p(y_t) / (trained tokens of all views), as a gradient pass.

    On-policy the ratio pi/pi_old is 1 and its gradient is that of log p, so this is GRPO's first step. The views
    are normalised by their own trained-token count, as the code that built them would do. ``token_weights`` (per
    view, per trained token; None = 1) select or reweight tokens: 0/1 masks give Lopti's groups, [alpha p + 1 -
    alpha] Advantage Reweighting. ``tokens_out`` receives every view's detached log p (views without a gradient
    are forwarded without one).
    """
    total = sum(v.n_trained for v in views) or 1

    def active(n: int) -> bool:
        w = token_weights[n] if token_weights is not None else None
        return advantages[n] != 0.0 and views[n].n_trained > 0 and (w is None or bool((w != 0).any()))

    def run(before_last: Callable[[], None] | None) -> None:
        stats: list[TokenStats | None] = [None] * len(views)
        live = [n for n in range(len(views)) if active(n)]
        for j, n in enumerate(live):
            logp, stats[n] = token_logps(model, vmap, views[n])
            w = token_weights[n] if token_weights is not None else None
            scale = advantages[n] * (w.to(logp.device, logp.dtype) if w is not None else 1.0)
            loss = -(scale * logp).sum() / total
            if j == len(live) - 1 and before_last is not None:
                before_last()
            loss.backward()
        if tokens_out is not None:
            for n in range(len(views)):
                st = stats[n]
                tokens_out.append(st if st is not None else token_logps(model, vmap, views[n], grad=False)[1])

    return run


@dataclass
class ViewGradient:
    grads: list[torch.Tensor]
    tokens: list[TokenStats]  # per episode


def view_gradient(
    model: Any,
    vmap: VocabMap,
    views: Sequence[View],
    advantages: Sequence[float],
    token_weights: Sequence[torch.Tensor | None] | None = None,
) -> ViewGradient:
    """The surrogate gradient held in full (one tensor per parameter; zeros where none): for small models and
    tests. The loop compares gradients with ``gradient_compare`` instead, which never holds two of them."""
    params = trainable(model)
    clear_grads(params)
    tokens: list[TokenStats] = []
    surrogate_pass(model, vmap, views, advantages, token_weights, tokens_out=tokens)(None)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    clear_grads(params)
    return ViewGradient(grads, tokens)
