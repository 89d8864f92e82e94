"""Where the two views disagree, and probability diagnostics of the policy.

- alignment: B and R id sequences aligned turn by turn with difflib; mask flips are split into "sampled token dropped
  from the loss" (B trains it, R does not) and "template or tool token trained on" (R trains what B does not); a
  trained token both views train, but after different ids ("context changed"), has another log-prob in R: a loss
  fact as much as a missing token;
- log-prob mismatch: |delta logp| and the importance ratio rho = exp(logp_R - logp_B) on aligned
  trained tokens;
- token facts per scenario (model-free, exact), the tool-call parse rate, sampler vs trainer log-probs, and
  whether the tokens R mistrains are low-probability or critical (``positions`` and ``critical_tokens``
  measure those).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tito_audit.policy.view import View

MEANINGLESS = (
    "meaningless on random weights (every token has p ~ 1/|V|): probability diagnostics are reported only "
    "for a trained policy's own samples (use --warmup N or --weights)"
)


NOT_SAMPLED = "not computed with --rollouts template: the episodes are the template's, not the policy's own samples"


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


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


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
        {
            "b_trained": 0,
            "r_trained": 0,
            "b_unmatched": 0,
            "r_unmatched": 0,
            "dropped": 0,
            "template_trained": 0,
            "context_changed": 0,
        }
        for _ in range(n_turns)
    ]
    pairs: list[tuple[int, int]] = []
    b_mismatched: list[int] = []
    same_prefix = _common_prefix(b.ids, r.ids)
    for t, m in enumerate(b.mask):
        if not m:
            continue
        row = turns[tb[t]]
        row["b_trained"] += 1
        if t not in amap:
            row["b_unmatched"] += 1
            b_mismatched.append(t)
        elif not r.mask[amap[t]]:
            row["dropped"] += 1
            b_mismatched.append(t)
        else:
            pairs.append((t, amap[t]))
            # The same token, trained in both views, but after other ids: its log-prob, hence the gradient, differs.
            if amap[t] != t or t > same_prefix:
                row["context_changed"] += 1
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
        "context_changed_trained": tot.get("context_changed", 0),
        "shape_mismatch": len(b.ids) != len(r.ids) or b.n_trained != r.n_trained,
        "identical": b.ids == r.ids and b.mask == r.mask,
        "turns": turns,
        "turns_affected": sum(
            bool(row["mismatched_trained"] or row["dropped"] or row["template_trained"]) for row in turns
        ),
        "turns_context_only": sum(
            bool(row["context_changed"])
            and not (row["mismatched_trained"] or row["dropped"] or row["template_trained"])
            for row in turns
        ),
        "pairs": pairs,
        "pair_turns": [tb[p] for p, _ in pairs],
        "b_mismatched_positions": b_mismatched,  # B trains them; R has no partner or does not train it
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


def align_batch(
    eps: Sequence[Any], b_tokens: Sequence[Any], r_tokens: Sequence[Any]
) -> tuple[list[dict[str, Any]], list[torch.Tensor]]:
    """Per-sequence alignment facts (with per-turn rows) and logp_R - logp_B on aligned trained tokens."""
    per_seq: list[dict[str, Any]] = []
    dlogps: list[torch.Tensor] = []
    for e, tb, tr in zip(eps, b_tokens, r_tokens, strict=True):
        a = alignment(e.buffer, e.naive)
        ib = {p: i for i, p in enumerate(tb.positions)}
        ir = {p: i for i, p in enumerate(tr.positions)}
        kept = [
            (ib[b], ir[r], k)
            for (b, r), k in zip(a.pop("pairs"), a.pop("pair_turns"), strict=True)
            if b in ib and r in ir
        ]
        d = torch.tensor([float(tr.logp[j] - tb.logp[i]) for i, j, _ in kept], dtype=torch.float64)
        dlogps.append(d)
        for k, row in enumerate(a["turns"]):
            dk = d[[n for n, (_, _, kk) in enumerate(kept) if kk == k]]
            row["aligned"] = int(dk.numel())
            row["abs_dlogp_max"] = float(dk.abs().max()) if dk.numel() else 0.0
            row["rho_min"] = float(dk.exp().min()) if dk.numel() else 1.0
            row["rho_max"] = float(dk.exp().max()) if dk.numel() else 1.0
        a["scenario"] = e.scenario_id
        a["dlogp_seq_sum"] = float(d.sum())
        per_seq.append(a)
    return per_seq, dlogps


LOSS_FACTS = ("mismatched_trained", "flip_sampled_dropped", "flip_template_trained", "context_changed_trained")


def token_facts(episodes: Sequence[Any], mode_of: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Model-free, exact: per scenario (and per thinking mode, ``mode_of`` maps a scenario id to its mode), what the
    R view changes in the trained tokens and in the context they condition on (summed over episodes).

    A sequence whose ids differ only after its last trained token in both views changes no log-prob a loss reads:
    it counts as ``sequences_after_training_only``, not as a loss fact."""
    rows: dict[str, dict[str, int]] = {}
    for e in episodes:
        a = alignment(e.buffer, e.naive)
        row = rows.setdefault(e.scenario_id, dict.fromkeys(_FACT_ROW, 0))
        row["sequences"] += 1
        row["sequences_affected"] += int(not a["identical"])
        loss = any(a[k] for k in LOSS_FACTS) or a["shape_mismatch"] or e.naive_error is not None
        row["sequences_after_training_only"] += int(not a["identical"] and not loss)
        row["turns"] += len(a["turns"])
        for k in ("turns_affected", "turns_context_only", "b_trained", *LOSS_FACTS):
            row[k] += a[k]
        row["shape_mismatch_sequences"] += int(a["shape_mismatch"])
        row["naive_crashes"] += int(e.naive_error is not None)
    modes: dict[str, dict[str, int]] = {}
    for name, row in rows.items():
        mode = modes.setdefault((mode_of or {}).get(name, "default"), dict.fromkeys(["scenarios", *_FACT_ROW], 0))
        mode["scenarios"] += 1
        for k, v in row.items():
            mode[k] += v
    return {
        **_totals(rows),
        "scenarios": len(rows),
        "scenarios_affected": sum(r["sequences_affected"] > 0 for r in rows.values()),
        "by_scenario": rows,
        "by_mode": modes,
    }


_FACT_ROW = (
    "sequences",
    "sequences_affected",
    "sequences_after_training_only",
    "turns",
    "turns_affected",
    "turns_context_only",
    "b_trained",
    *LOSS_FACTS,
    "shape_mismatch_sequences",
    "naive_crashes",
)


def _totals(rows: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    return {k: sum(r[k] for r in rows.values()) for k in _FACT_ROW}


def parse_rate(eps: Sequence[Any]) -> dict[str, Any]:
    """Sampled turns with calls the template can show, and how many R parsed back to the expected calls."""
    facts = [f for e in eps for f in e.parses if f["calls_ok"] is not None]
    ok = sum(bool(f["calls_ok"]) for f in facts)
    return {"turns_expected": len(facts), "turns_parsed": ok, "rate": ok / len(facts) if facts else None}


def sampler_vs_trainer(eps: Sequence[Any], b_tokens: Sequence[Any], clip: float) -> dict[str, Any]:
    """Sampler log p (bf16 autocast on GPU) against the trainer's recompute on the same tokens."""
    diffs = [
        torch.tensor(
            [
                float(b.logp[i]) - float(e.rollout_logprobs[p])
                for i, p in enumerate(b.positions)
                if e.rollout_logprobs[p] is not None
            ],
            dtype=torch.float64,
        )
        for e, b in zip(eps, b_tokens, strict=True)
    ]
    return logp_mismatch(diffs, clip)


def mismatch_on(
    per_seq: Sequence[dict[str, Any]], stats: Sequence[Any], eta: float, tested: Sequence[tuple[int, int, bool]]
) -> dict[str, Any]:
    """How many B tokens that R mistrains are low-probability (p < eta) or critical (among the tested ones)."""
    low = total = 0
    for a, st in zip(per_seq, stats, strict=True):
        idx = {p: i for i, p in enumerate(st.positions)}
        for t in a["b_mismatched_positions"]:
            if t in idx:
                total += 1
                low += int(float(st.logp[idx[t]].exp()) < eta)
    crit = {(n, t): c for n, t, c in tested}
    mism = {(n, t) for n, a in enumerate(per_seq) for t in a["b_mismatched_positions"]}
    tested_m = [crit[k] for k in mism if k in crit]
    return {
        "mismatched_b_tokens": total,
        "low_probability": low,
        "eta": eta,
        "tested_for_critical": len(tested_m),
        "critical": sum(tested_m),
    }
