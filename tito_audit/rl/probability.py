"""Probability diagnostics of a trained policy's own samples, as parameter-gradient measurements.

- position statistics: policy and reference log p of each sampled token, the exact KL and the reference entropy
  at each trained position (one no-grad forward of each model);
- low-probability tokens (Yang et al. 2025, seed 004): parameter-gradient norms of the tokens with p < eta and
  p >= eta (and per p quartile), each from its own backward pass; Advantage Reweighting's gradient
  (A' = [alpha p + 1 - alpha] A) against the plain one; Lopti's two-stage update (low-p tokens first, then the
  high-p tokens' gradient recomputed at the updated parameters) against the joint update;
- critical tokens (Vassoyan et al. 2025, seed 003): a token is critical when changing it flips the outcome. On
  turns with a verifiable outcome (the expected tool calls), the token is replaced by the policy's best other
  token, the turn is completed greedily, parsed with the template's format and rewarded again.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tito_audit.rl.episodes import View
from tito_audit.rl.gradients import Grads, compare, norm, position_logits, trained_positions
from tito_audit.rl.model import VocabMap


@dataclass
class PositionStats:
    positions: list[int]
    logp: torch.Tensor  # policy log p(y_t), float64
    logp_ref: torch.Tensor
    kl_exact: torch.Tensor
    entropy_ref: torch.Tensor


@torch.no_grad()
def position_stats(policy: Any, ref: Any, vmap: VocabMap, view: View) -> PositionStats:
    from tito_audit.rl.kl import exact_kl

    positions = trained_positions(view.mask)
    if not positions:
        z = torch.zeros(0, dtype=torch.float64)
        return PositionStats(positions, z, z, z, z)
    lg = position_logits(policy, vmap, view, positions)
    lr = position_logits(ref, vmap, view, positions).to(lg.device)
    y = torch.tensor(vmap.to_model([view.ids[t] for t in positions]), device=lg.device)
    lp, lq = torch.log_softmax(lg.double(), -1), torch.log_softmax(lr.double(), -1)
    ent = -(lq.exp() * lq).sum(-1)
    return PositionStats(
        positions,
        lp.gather(1, y[:, None])[:, 0].cpu(),
        lq.gather(1, y[:, None])[:, 0].cpu(),
        exact_kl(lg, lr).cpu(),
        ent.cpu(),
    )


def _group_gradient(
    policy: Any, vmap: VocabMap, views: Sequence[View], adv: Sequence[float], weights: Sequence[torch.Tensor]
) -> Grads:
    from tito_audit.rl.gradients import view_gradient

    return view_gradient(policy, vmap, views, adv, weights).grads


def _mean_logp(policy: Any, vmap: VocabMap, views: Sequence[View], select: Sequence[torch.Tensor]) -> float:
    from tito_audit.rl.gradients import token_logps

    vals = [token_logps(policy, vmap, v, grad=False)[1].logp[s.bool()] for v, s in zip(views, select, strict=True)]
    allv = torch.cat(vals) if vals else torch.zeros(0, dtype=torch.float64)
    return float(allv.mean()) if allv.numel() else 0.0


def _step(model: Any, grads: Grads, lr: float) -> None:
    with torch.no_grad():
        for p, g in zip([p for p in model.parameters() if p.requires_grad], grads, strict=True):
            p.sub_(lr * g.to(p.dtype))


def low_probability_study(
    policy: Any,
    vmap: VocabMap,
    views: Sequence[View],
    adv: Sequence[float],
    p_y: Sequence[torch.Tensor],
    g_all: Grads,
    eta: float = 0.5,
    alpha: float = 0.3,
    step_norm: float = 0.1,
) -> dict[str, Any]:
    """Seed 004 on this batch. ``p_y`` per view: policy probability of each trained token; ``g_all`` the plain
    gradient. Leaves ``.grad`` holding garbage: call before recomputing what the optimiser needs."""
    allp = torch.cat([p.double() for p in p_y]) if p_y else torch.zeros(0, dtype=torch.float64)
    if allp.numel() < 4:
        return {"tokens": int(allp.numel())}
    low = [(p < eta).double() for p in p_y]
    high = [(p >= eta).double() for p in p_y]
    g_low = _group_gradient(policy, vmap, views, adv, low)
    g_high = _group_gradient(policy, vmap, views, adv, high)
    edges = torch.quantile(allp, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    quart = [torch.bucketize(p.double(), edges, right=True) for p in p_y]
    q_norms, q_counts = [], []
    for q in range(4):
        sel = [(b == q).double() for b in quart]
        q_counts.append(int(sum(float(s.sum()) for s in sel)))
        q_norms.append(norm(_group_gradient(policy, vmap, views, adv, sel)))
    g_ar = _group_gradient(policy, vmap, views, adv, [alpha * p.double() + (1 - alpha) for p in p_y])
    n_low = int(sum(float(s.sum()) for s in low))
    out: dict[str, Any] = {
        "tokens": int(allp.numel()),
        "eta": eta,
        "low_tokens": n_low,
        "high_tokens": int(allp.numel()) - n_low,
        "low_fraction": n_low / allp.numel(),
        "grad_norm_all": norm(g_all),
        "grad_norm_low": norm(g_low),
        "grad_norm_high": norm(g_high),
        "quartile_upper_p": [float(e) for e in edges] + [float(allp.max())],
        "quartile_tokens": q_counts,
        "quartile_grad_norm": q_norms,
        "alpha": alpha,
        "advantage_reweighted": compare(g_all, g_ar),
    }
    # Lopti, simulated with plain gradient steps of parameter-norm ``step_norm`` (joint step's size).
    na = out["grad_norm_all"]
    if na > 0:
        lr = step_norm / na
        joint = copy.deepcopy(policy)
        _step(joint, g_all, lr)
        staged = copy.deepcopy(policy)
        _step(staged, g_low, lr)
        g_high_after = _group_gradient(staged, vmap, views, adv, high)
        _step(staged, g_high_after, lr)
        base_high, base_low = _mean_logp(policy, vmap, views, high), _mean_logp(policy, vmap, views, low)
        params = [p for p in policy.parameters() if p.requires_grad]
        d_joint = [
            q.detach() - p.detach()
            for p, q in zip(params, [x for x in joint.parameters() if x.requires_grad], strict=True)
        ]
        d_staged = [
            q.detach() - p.detach()
            for p, q in zip(params, [x for x in staged.parameters() if x.requires_grad], strict=True)
        ]
        out["lopti"] = {
            "step_lr": lr,
            "update_vs_joint": compare(d_joint, d_staged),
            "high_mean_dlogp_joint": _mean_logp(joint, vmap, views, high) - base_high,
            "high_mean_dlogp_lopti": _mean_logp(staged, vmap, views, high) - base_high,
            "low_mean_dlogp_joint": _mean_logp(joint, vmap, views, low) - base_low,
            "low_mean_dlogp_lopti": _mean_logp(staged, vmap, views, low) - base_low,
        }
        del joint, staged
    return out


@torch.no_grad()
def _greedy_tail(
    model: Any, vmap: VocabMap, prefix: Sequence[int], stop_ids: Sequence[int], max_new: int, valid: int | None
) -> list[int]:
    device = next(model.parameters()).device
    ids = torch.tensor([vmap.to_model(prefix)], device=device)
    stops = set(stop_ids)
    out: list[int] = []
    past = None
    for _ in range(max_new):
        res = model(input_ids=ids, past_key_values=past, use_cache=True)
        past = res.past_key_values
        logits = res.logits[0, -1].float()
        _mask_invalid(logits, vmap, valid)
        tok = vmap.to_tok([int(logits.argmax())])[0]
        out.append(tok)
        if tok in stops:
            break
        ids = torch.tensor([vmap.to_model([tok])], device=device)
    return out


def _mask_invalid(logits: torch.Tensor, vmap: VocabMap, valid: int | None) -> None:
    if vmap.unk is not None:
        logits[vmap.unk] = float("-inf")
    if valid is not None and logits.numel() > valid:
        logits[valid:] = float("-inf")


@dataclass
class VerifiableTurn:
    """A sampled turn whose outcome can be checked: its span in the buffer and how to score a new text."""

    episode: int
    start: int
    end: int
    reward: float
    score: Callable[[list[int]], float]  # sampled ids of the turn -> reward


@torch.no_grad()
def critical_tokens(
    policy: Any,
    vmap: VocabMap,
    buffers: Sequence[View],
    turns: Sequence[VerifiableTurn],
    entropy_ref: dict[tuple[int, int], float],
    stop_ids: Sequence[int],
    max_new: int,
    budget: int,
    rng: random.Random,
    texts: Callable[[list[int]], list[str]],
    valid: int | None = None,
) -> dict[str, Any]:
    """Seed 003: at up to ``budget`` positions of verifiable turns, swap the token for the policy's best other
    token, complete greedily and re-score. Certainty J = (log|V| - H(pi_ref)) / log|V| at each position."""
    cands = [(n, t) for n, vt in enumerate(turns) for t in range(max(vt.start, 1), vt.end)]
    chosen = sorted(rng.sample(cands, min(budget, len(cands))))
    hmax = math.log(vmap.size)
    rows: list[dict[str, Any]] = []
    device = next(policy.parameters()).device
    for n, t in chosen:
        vt = turns[n]
        buf = buffers[vt.episode]
        ids = torch.tensor([vmap.to_model(buf.ids[:t])], device=device)
        logits = policy(input_ids=ids, logits_to_keep=1, use_cache=False).logits[0, -1].float()
        _mask_invalid(logits, vmap, valid)
        logits[vmap.to_model([buf.ids[t]])[0]] = float("-inf")
        alt = vmap.to_tok([int(logits.argmax())])[0]
        if alt in set(stop_ids):
            tail: list[int] = []
        else:
            tail = _greedy_tail(policy, vmap, [*buf.ids[:t], alt], stop_ids, max(1, max_new - (t - vt.start)), valid)
        new_turn = [*buf.ids[vt.start : t], alt, *tail]
        reward = vt.score(new_turn)
        h = entropy_ref.get((vt.episode, t))
        j = (hmax - h) / hmax if h is not None else None
        rows.append(
            {
                "episode": vt.episode,
                "position": t,
                "token": texts([buf.ids[t]])[0],
                "alternative": texts([alt])[0],
                "critical": reward != vt.reward,
                "J": j,
            }
        )
    crit = [r for r in rows if r["critical"]]
    rest = [r for r in rows if not r["critical"]]

    def mean_j(rs: list[dict[str, Any]]) -> float | None:
        js = [r["J"] for r in rs if r["J"] is not None]
        return sum(js) / len(js) if js else None

    return {
        "verifiable_turns": len(turns),
        "tested_positions": len(rows),
        "critical": len(crit),
        "critical_fraction": len(crit) / len(rows) if rows else None,
        "J_mean_critical": mean_j(crit),
        "J_mean_other": mean_j(rest),
        "examples": crit[:8],
        "tested": [(r["episode"], r["position"], r["critical"]) for r in rows],
    }
