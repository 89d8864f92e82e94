"""Per-token log-probabilities at trained positions and the policy gradient of one view.

The output layer is applied only at trained positions, in chunks (with activation checkpointing), which is
what makes a full 150k-vocabulary step affordable on CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from tito_audit.rl.episodes import View
from tito_audit.rl.model import VocabMap

CHECKPOINT_ABOVE = 1024  # trained tokens in one sequence above which the head is recomputed in backward


@dataclass
class TokenStats:
    """Detached per-token quantities at the trained positions of one sequence (in sequence order)."""

    positions: list[int]
    logp: torch.Tensor  # log p(y_t | y_<t)
    sum_p2: torch.Tensor | None = None  # sum_v p_v^2 (for |p - e_y|)
    entropy: torch.Tensor | None = None  # H(p)


def _head(h: torch.Tensor, weight: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = (h @ weight.t()).float()
    return logits.gather(1, y[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)


def _head_stats(h: torch.Tensor, weight: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    logits = (h @ weight.t()).float()
    logz = torch.logsumexp(logits, dim=-1)
    logp_all = logits - logz[:, None]
    p = logp_all.exp()
    return (logp_all.gather(1, y[:, None])[:, 0], (p * p).sum(-1), -(p * logp_all).sum(-1))


def trained_positions(mask: Sequence[int]) -> list[int]:
    return [t for t, m in enumerate(mask) if m and t > 0]


def token_logps(
    model: object, vmap: VocabMap, view: View, *, stats: bool = False, chunk: int = 256, grad: bool = True
) -> tuple[torch.Tensor, TokenStats]:
    """log p of each trained token of ``view`` (differentiable when ``grad``), plus detached stats."""
    device = next(model.parameters()).device  # type: ignore[attr-defined]
    positions = trained_positions(view.mask)
    ids = torch.tensor([vmap.to_model(view.ids)], device=device)
    with torch.set_grad_enabled(grad):
        hidden = model.model(input_ids=ids).last_hidden_state[0]  # type: ignore[attr-defined]
        weight = model.get_output_embeddings().weight  # type: ignore[attr-defined]
        pos = torch.tensor(positions, device=device, dtype=torch.long)
        h = hidden.index_select(0, pos - 1) if positions else hidden[:0]
        y = ids[0].index_select(0, pos) if positions else ids[0][:0]
        outs: list[torch.Tensor] = []
        p2s: list[torch.Tensor] = []
        ents: list[torch.Tensor] = []
        for a in range(0, len(positions), chunk):
            hc, yc = h[a : a + chunk], y[a : a + chunk]
            if stats:
                with torch.no_grad():
                    _, p2, ent = _head_stats(hc.detach(), weight.detach(), yc)
                p2s.append(p2)
                ents.append(ent)
            if grad and torch.is_grad_enabled() and len(positions) > CHECKPOINT_ABOVE:
                outs.append(checkpoint(_head, hc, weight, yc, use_reentrant=False))
            else:
                outs.append(_head(hc, weight, yc))
        logp = torch.cat(outs) if outs else torch.zeros(0, device=device)
    st = TokenStats(
        positions,
        logp.detach().float().cpu(),
        torch.cat(p2s).cpu() if stats and p2s else (torch.zeros(0) if stats else None),
        torch.cat(ents).cpu() if stats and ents else (torch.zeros(0) if stats else None),
    )
    return logp, st


@dataclass
class ViewGradient:
    flat: torch.Tensor  # the whole parameter gradient, flattened (fp32, CPU)
    tokens: list[TokenStats]  # per episode
    loss: float


def flat_grad(model: object) -> torch.Tensor:
    parts = []
    for p in model.parameters():  # type: ignore[attr-defined]
        if p.requires_grad:
            parts.append((p.grad if p.grad is not None else torch.zeros_like(p)).detach().float().reshape(-1))
    return torch.cat(parts).cpu()


def view_gradient(
    model: object,
    vmap: VocabMap,
    views: Sequence[View],
    advantages: Sequence[float],
    *,
    stats: bool = False,
    chunk: int = 256,
) -> ViewGradient:
    """Gradient of the GRPO surrogate -sum_t A_i * log p(y_t) / (trained tokens of this view).

    On-policy, the ratio pi/pi_old is 1 and its gradient is that of log p, so this is the first step of GRPO.
    Each view is normalised by its own trained-token count, as the code that built it would do.
    """
    model.zero_grad(set_to_none=True)  # type: ignore[attr-defined]
    total = sum(v.n_trained for v in views) or 1
    loss_sum = 0.0
    tokens: list[TokenStats] = []
    for view, adv in zip(views, advantages, strict=True):
        logp, st = token_logps(model, vmap, view, stats=stats, chunk=chunk, grad=adv != 0.0)
        tokens.append(st)
        if adv != 0.0 and logp.numel():
            loss = -(adv * logp.float()).sum() / total
            loss.backward()
            loss_sum += float(loss.detach())
    return ViewGradient(flat_grad(model), tokens, loss_sum)


def compare(gb: torch.Tensor, gr: torch.Tensor) -> dict[str, float | None]:
    """Cosine similarity and relative L2 error ||g_R - g_B|| / ||g_B||, in float64."""
    b, r = gb.double(), gr.double()
    nb, nr = float(b.norm()), float(r.norm())
    if nb == 0.0:
        return {"cosine": None, "rel_error": None, "norm_b": nb, "norm_r": nr}
    if torch.equal(b, r):
        return {"cosine": 1.0, "rel_error": 0.0, "norm_b": nb, "norm_r": nr}
    cos = float((b @ r) / (nb * nr)) if nr > 0 else 0.0
    return {"cosine": cos, "rel_error": float((r - b).norm() / nb), "norm_b": nb, "norm_r": nr}
