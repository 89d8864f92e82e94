"""Where the two views disagree, and probability diagnostics of the policy.

- alignment: B and R id sequences aligned with difflib; mask flips are split into "sampled token dropped
  from the loss" (B trains it, R does not) and "template or tool token trained on" (R trains what B does not);
- log-prob mismatch: |delta logp| and the importance ratio rho = exp(logp_R - logp_B) on aligned
  trained tokens;
- low-probability-token dominance (Yang et al. 2025): the gradient of the surrogate on the logits of token t
  is A_t * (p - e_y) / N, whose norm is |A_t| * sqrt(sum p^2 - 2 p_y + 1) / N; its share per quartile of p_y,
  and what Advantage Reweighting and Lopti would change;
- critical tokens (Vassoyan et al. 2025): certainty J = (log|V| - H(pi_ref)) / log|V| and dJ against the
  mean of the other tokens of the sequence.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from typing import Any

import torch

from tito_audit.rl.episodes import View

MEANINGLESS = (
    "meaningless on random weights (every token has p ~ 1/|V|): probability diagnostics are reported only "
    "for a trained policy's own samples (use --warmup N or --weights)"
)


def align(b: View, r: View) -> dict[int, int]:
    """B position -> R position for tokens in matching blocks."""
    sm = difflib.SequenceMatcher(None, b.ids, r.ids, autojunk=False)
    out: dict[int, int] = {}
    for blk in sm.get_matching_blocks():
        for k in range(blk.size):
            out[blk.a + k] = blk.b + k
    return out


def alignment(b: View, r: View) -> dict[str, Any]:
    amap = align(b, r)
    b_trained = [t for t, m in enumerate(b.mask) if m]
    unmatched = [t for t in b_trained if t not in amap]
    dropped = [t for t in b_trained if t in amap and not r.mask[amap[t]]]
    inv = {v: k for k, v in amap.items()}
    r_trained = [t for t, m in enumerate(r.mask) if m]
    trained_on = [t for t in r_trained if t in inv and not b.mask[inv[t]]]
    r_unmatched = [t for t in r_trained if t not in inv]
    return {
        "b_tokens": len(b.ids),
        "r_tokens": len(r.ids),
        "b_trained": len(b_trained),
        "r_trained": len(r_trained),
        "mismatched_trained": len(unmatched) + len(r_unmatched),
        "b_trained_unmatched": len(unmatched),
        "r_trained_unmatched": len(r_unmatched),
        "flip_sampled_dropped": len(dropped),
        "flip_template_trained": len(trained_on),
        "shape_mismatch": len(b.ids) != len(r.ids) or b.n_trained != r.n_trained,
        "identical": b.ids == r.ids and b.mask == r.mask,
        "pairs": [(t, amap[t]) for t in b_trained if t in amap and r.mask[amap[t]]],
    }


def batch_alignment(per_seq: Sequence[dict[str, Any]]) -> dict[str, Any]:
    bt = sum(a["b_trained"] for a in per_seq) or 1
    mism = sum(a["mismatched_trained"] for a in per_seq)
    return {
        "sequences": len(per_seq),
        "sequences_affected": sum(not a["identical"] for a in per_seq),
        "mismatched_trained": mism,
        "mismatched_fraction": mism / bt,
        "flip_sampled_dropped": sum(a["flip_sampled_dropped"] for a in per_seq),
        "flip_template_trained": sum(a["flip_template_trained"] for a in per_seq),
        "shape_mismatch_sequences": sum(a["shape_mismatch"] for a in per_seq),
    }


def logp_mismatch(pairs_dlogp: Sequence[torch.Tensor], clip: float) -> dict[str, Any]:
    """|delta logp| and rho = exp(logp_R - logp_B) on aligned
    trained tokens; ``clip`` is truncated-IS C."""
    allv = torch.cat([d.double() for d in pairs_dlogp]) if pairs_dlogp else torch.zeros(0, dtype=torch.float64)
    if not allv.numel():
        return {"tokens": 0}
    rho = allv.exp()
    outside = ((rho > clip) | (rho < 1 / clip)).double().mean()
    return {
        "tokens": int(allv.numel()),
        "abs_dlogp_mean": float(allv.abs().mean()),
        "abs_dlogp_max": float(allv.abs().max()),
        "rho_min": float(rho.min()),
        "rho_mean": float(rho.mean()),
        "rho_max": float(rho.max()),
        "rho_outside_fraction": float(outside),
        "clip": clip,
        "seq_sum_dlogp": [float(d.double().sum()) for d in pairs_dlogp],
    }


def logit_grad_norms(p_y: torch.Tensor, sum_p2: torch.Tensor, adv: torch.Tensor) -> torch.Tensor:
    """|A| * ||p - e_y||_2 per token (the gradient of -A log p_y on the logits)."""
    return adv.abs() * (sum_p2 - 2 * p_y + 1).clamp_min(0).sqrt()


def quartile_shares(
    p_y: torch.Tensor, sum_p2: torch.Tensor, adv: torch.Tensor, alpha: float = 0.3, eta: float = 0.5
) -> dict[str, Any]:
    """Gradient-norm share per p_y quartile, with Advantage Reweighting and Lopti's split."""
    if p_y.numel() < 4:
        return {"tokens": int(p_y.numel())}
    p_y, sum_p2, adv = p_y.double(), sum_p2.double(), adv.double()
    edges = torch.quantile(p_y, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    q = torch.bucketize(p_y, edges, right=True)
    g = logit_grad_norms(p_y, sum_p2, adv)
    g_rw = logit_grad_norms(p_y, sum_p2, (alpha * p_y + (1 - alpha)) * adv)

    def shares(x: torch.Tensor) -> list[float]:
        tot = float(x.sum()) or 1.0
        return [float(x[q == k].sum()) / tot for k in range(4)]

    low = p_y < eta
    tot = float(g.sum()) or 1.0
    return {
        "tokens": int(p_y.numel()),
        "quartile_upper_p": [float(e) for e in edges] + [float(p_y.max())],
        "quartile_mean_grad_norm": [float(g[q == k].mean()) if bool((q == k).any()) else 0.0 for k in range(4)],
        "share": shares(g),
        "share_advantage_reweighted": shares(g_rw),
        "alpha": alpha,
        "lopti_eta": eta,
        "lopti_low_fraction": float(low.double().mean()),
        "lopti_low_grad_share": float(g[low].sum()) / tot,
    }


def critical_tokens(
    entropies: Sequence[torch.Tensor],
    vocab_size: int,
    texts: Sequence[Sequence[str]],
    beta: float,
    top: int = 8,
) -> dict[str, Any]:
    """Certainty J under the reference, dJ against the sequence mean of the other tokens, lowest dJ listed."""
    hmax = math.log(vocab_size)
    rows: list[dict[str, Any]] = []
    all_dj: list[float] = []
    per_seq_j: list[list[float]] = []
    for s, (ent, txt) in enumerate(zip(entropies, texts, strict=True)):
        j = (hmax - ent.double()) / hmax
        per_seq_j.append([float(x) for x in j])
        n = j.numel()
        if n < 2:
            continue
        others = (j.sum() - j) / (n - 1)
        dj = j - others
        all_dj.extend(float(x) for x in dj)
        for t in range(n):
            rows.append(
                {
                    "seq": s,
                    "index": t,
                    "text": txt[t],
                    "J": float(j[t]),
                    "dJ": float(dj[t]),
                    "weight": float(j[t]) ** beta,
                }
            )
    rows.sort(key=lambda r: r["dJ"])
    mean_w = sum(r["weight"] for r in rows) / len(rows) if rows else 0.0
    return {
        "tokens": len(rows),
        "beta": beta,
        "dJ_mean": sum(all_dj) / len(all_dj) if all_dj else 0.0,
        "dJ_min": min(all_dj) if all_dj else 0.0,
        "mean_weight": mean_w,
        "lowest": rows[:top],
        "J": per_seq_j,
    }
