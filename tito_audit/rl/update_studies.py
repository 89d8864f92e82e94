"""Advantage Reweighting and Lopti (Yang et al. 2025) simulated on one batch, next to the plain update.

- Advantage Reweighting: A' = [alpha p + (1 - alpha)] A; reported as the cosine of its gradient to the plain one.
- Lopti: stage 1 updates on the tokens with p < eta, stage 2 recomputes the gradient of the tokens with p >= eta
  at the updated parameters and updates again. Both stages, and the joint update they are compared with, are
  plain gradient steps with one learning rate, chosen so that the joint step moves the parameters by
  ``step_norm`` (L2): the on-policy surrogate, so there is no PPO ratio and no clipping in stage 2 (the paper's
  stage 2 runs under PPO's clipped ratio; here the ratio would be 1 at stage 1's parameters only).
- What each update does to the tokens: mean change of log p over the high-p and the low-p tokens, apart for
  A > 0 and A < 0 (Lopti's claim is about the high-p tokens, which the joint update can push the wrong way).

No copy of the model is made: the policy is stepped in place, measured, and stepped back (exact up to one
rounding per parameter element). Peak memory: three gradients (the plain one, stage 1's, stage 2's while it
accumulates over the views).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tito_audit.policy.gradient_compare import (
    HeldGradient,
    add_to_parameters,
    compare,
    compare_with,
    hold_gradient,
    trainable,
)
from tito_audit.policy.gradients import surrogate_pass, token_logps
from tito_audit.policy.model import VocabMap
from tito_audit.policy.view import View

GROUPS = ("high_positive", "high_negative", "low_positive", "low_negative")


def _selections(p_y: Sequence[torch.Tensor], adv: Sequence[float], eta: float) -> dict[str, list[torch.Tensor]]:
    out: dict[str, list[torch.Tensor]] = {}
    for g in GROUPS:
        high, positive = g.startswith("high"), g.endswith("positive")
        out[g] = [
            ((p >= eta) if high else (p < eta)) & torch.tensor((a > 0) if positive else (a < 0))
            for p, a in zip(p_y, adv, strict=True)
        ]
    return out


def _group_means(
    policy: Any, vmap: VocabMap, views: Sequence[View], select: dict[str, list[torch.Tensor]]
) -> dict[str, float | None]:
    logps = [token_logps(policy, vmap, v, grad=False)[1].logp for v in views]
    out: dict[str, float | None] = {}
    for g, sel in select.items():
        vals = torch.cat([lp[s] for lp, s in zip(logps, sel, strict=True)]) if logps else torch.zeros(0)
        out[g] = float(vals.mean()) if vals.numel() else None
    return out


def _delta(after: dict[str, float | None], before: dict[str, float | None]) -> dict[str, float | None]:
    return {
        g: (a - b) if a is not None and b is not None else None
        for g, a, b in ((g, after[g], before[g]) for g in before)
    }


def update_studies(
    policy: Any,
    vmap: VocabMap,
    views: Sequence[View],
    adv: Sequence[float],
    p_y: Sequence[torch.Tensor],
    eta: float = 0.5,
    alpha: float = 0.3,
    step_norm: float = 0.1,
) -> dict[str, Any]:
    """AR's and Lopti's updates against the plain one on this batch. ``p_y``: per view, the policy's p of each
    trained token. Leaves ``.grad`` empty and the parameters where they were."""
    params = trainable(policy)
    select = _selections(p_y, adv, eta)
    low = [(p < eta).double() for p in p_y]
    high = [(p >= eta).double() for p in p_y]
    counts = {g: int(sum(int(s.sum()) for s in sel)) for g, sel in select.items()}
    plain = hold_gradient(params, surrogate_pass(policy, vmap, views, adv))
    norm = plain.norm()
    out: dict[str, Any] = {"eta": eta, "alpha": alpha, "tokens": counts}
    if norm == 0.0:
        plain.release()
        out["skipped"] = "the plain gradient is zero (every advantage is 0): no update to compare"
        return out
    reweighted = [alpha * p.double() + (1 - alpha) for p in p_y]
    ar = compare_with(plain, surrogate_pass(policy, vmap, views, adv, reweighted), release=False)
    out["advantage_reweighted"] = {"cosine_to_plain": ar.cosine, "rel_difference": ar.rel_error}

    lr = step_norm / norm
    before = _group_means(policy, vmap, views, select)
    add_to_parameters(params, plain.grads, -lr)
    joint = _group_means(policy, vmap, views, select)
    add_to_parameters(params, plain.grads, lr)

    total = hold_gradient(params, surrogate_pass(policy, vmap, views, adv, low))
    add_to_parameters(params, total.grads, -lr)  # stage 1

    def stage2(i: int, p: torch.Tensor, grad: torch.Tensor | None) -> None:
        if grad is None:
            return
        with torch.no_grad():
            p.sub_(grad.to(p.dtype), alpha=lr)  # stage 2's step, parameter by parameter as it is produced
        held = total.grads[i]
        total.grads[i] = grad.detach() if held is None else held.add_(grad.to(held.dtype))

    compare_with(
        HeldGradient(params, [None] * len(params)),
        surrogate_pass(policy, vmap, views, adv, high),
        on_parameter=stage2,
    )
    staged = _group_means(policy, vmap, views, select)
    add_to_parameters(params, total.grads, lr)  # back to where the batch started
    versus = compare(plain.grads, total.grads)
    plain.release()
    total.release()
    out["lopti"] = {
        "update": "plain gradient steps of one learning rate (no PPO ratio, no clipping in stage 2)",
        "step_norm_joint": step_norm,
        "learning_rate": lr,
        "step_norm_lopti": lr * versus.norm_b,
        "update_cosine_to_joint": versus.cosine,
        "mean_dlogp_joint": _delta(joint, before),
        "mean_dlogp_lopti": _delta(staged, before),
    }
    return out
