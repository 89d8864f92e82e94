"""Where the two views disagree, and probability diagnostics of the policy.

- alignment: B and R id sequences aligned turn by turn with difflib; mask flips are split into "sampled token dropped
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


def _blocks(view: View) -> list[tuple[int, int]]:
    """Block k runs from the end of turn k-1 to the end of turn k (its context, then its trained span);
    the last block also takes whatever follows the last turn."""
    if not view.turns:
        return [(0, len(view.ids))]
    ends = [e for _, e in view.turns]
    starts = [0, *ends[:-1]]
    blocks = list(zip(starts, ends, strict=True))
    if blocks:
        blocks[-1] = (blocks[-1][0], max(blocks[-1][1], len(view.ids)))
    return blocks or [(0, len(view.ids))]


def align(b: View, r: View) -> dict[int, int]:
    """B position -> R position for tokens in matching blocks, matched turn by turn.

    Turn k of B is matched only against turn k of R (and the context just before each), so that identical
    repeated turns can never be paired across turns. Falls back to one whole-sequence match when the two
    views do not have the same number of assistant turns (R could not be rebuilt).
    """
    bb, rb = _blocks(b), _blocks(r)
    if len(bb) != len(rb):
        bb, rb = [(0, len(b.ids))], [(0, len(r.ids))]
    out: dict[int, int] = {}
    for (b0, b1), (r0, r1) in zip(bb, rb, strict=True):
        sm = difflib.SequenceMatcher(None, b.ids[b0:b1], r.ids[r0:r1], autojunk=False)
        for blk in sm.get_matching_blocks():
            for k in range(blk.size):
                out[b0 + blk.a + k] = r0 + blk.b + k
    return out


def _turn_of(view: View) -> list[int]:
    """Block index of every position."""
    turn = [0] * len(view.ids)
    for k, (a, e) in enumerate(_blocks(view)):
        for t in range(a, min(e, len(turn))):
            turn[t] = k
    return turn


def alignment(b: View, r: View) -> dict[str, Any]:
    """Per-turn and per-sequence token facts: trained tokens without a partner, mask flips, aligned pairs."""
    amap = align(b, r)
    inv = {v: k for k, v in amap.items()}
    tb, tr = _turn_of(b), _turn_of(r)
    n_turns = max(len(_blocks(b)), len(_blocks(r)))
    turns = [
        {"b_trained": 0, "r_trained": 0, "b_unmatched": 0, "r_unmatched": 0, "dropped": 0, "template_trained": 0}
        for _ in range(n_turns)
    ]
    pairs: list[tuple[int, int]] = []
    for t, m in enumerate(b.mask):
        if not m:
            continue
        row = turns[tb[t]]
        row["b_trained"] += 1
        if t not in amap:
            row["b_unmatched"] += 1
        elif not r.mask[amap[t]]:
            row["dropped"] += 1
        else:
            pairs.append((t, amap[t]))
    for t, m in enumerate(r.mask):
        if not m:
            continue
        row = turns[min(tr[t], n_turns - 1)]
        row["r_trained"] += 1
        if t not in inv:
            row["r_unmatched"] += 1
        elif not b.mask[inv[t]]:
            row["template_trained"] += 1
    for row in turns:
        row["mismatched_trained"] = row["b_unmatched"] + row["r_unmatched"]
    tot = {k: sum(row[k] for row in turns) for k in turns[0]} if turns else {}
    return {
        "b_tokens": len(b.ids),
        "r_tokens": len(r.ids),
        "b_trained": tot.get("b_trained", 0),
        "r_trained": tot.get("r_trained", 0),
        "mismatched_trained": tot.get("mismatched_trained", 0),
        "b_trained_unmatched": tot.get("b_unmatched", 0),
        "r_trained_unmatched": tot.get("r_unmatched", 0),
        "flip_sampled_dropped": tot.get("dropped", 0),
        "flip_template_trained": tot.get("template_trained", 0),
        "shape_mismatch": len(b.ids) != len(r.ids) or b.n_trained != r.n_trained,
        "identical": b.ids == r.ids and b.mask == r.mask,
        "turns": turns,
        "turns_affected": sum(
            bool(row["mismatched_trained"] or row["dropped"] or row["template_trained"]) for row in turns
        ),
        "pairs": pairs,
        "pair_turns": [tb[p] for p, _ in pairs],
    }


def batch_alignment(per_seq: Sequence[dict[str, Any]]) -> dict[str, Any]:
    bt = sum(a["b_trained"] for a in per_seq) or 1
    mism = sum(a["mismatched_trained"] for a in per_seq)
    return {
        "sequences": len(per_seq),
        "sequences_affected": sum(not a["identical"] for a in per_seq),
        "turns": sum(len(a["turns"]) for a in per_seq),
        "turns_affected": sum(a["turns_affected"] for a in per_seq),
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
