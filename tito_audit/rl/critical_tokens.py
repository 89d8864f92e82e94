"""Critical tokens (after Vassoyan et al. 2025, seed 003), by this tool's own outcome-flip test.

The paper's quantities are computed as the paper defines them: the reference's certainty at a position,
J = (H_max - H(pi_ref)) / H_max with H_max = log |V| over the tokenizer's full vocabulary (not a compacted
stand-in vocabulary); dJ = J minus the mean J over the other trained positions of the same sequence (critical
tokens have strongly negative dJ); and the prioritised KL penalty's per-token weight J^beta (the paper's beta = 150
was set for a small vocabulary: with log |V| over 150k tokens J crowds near 1 and beta needs rescaling).

Which tokens are critical is this tool's operationalisation, not the paper's definition (the paper calls critical
the few tokens on which the outcome hinges and finds them by where a fine-tuned model departs from its
reference): on turns whose outcome is verifiable (the expected tool calls, parsed with the template's format), a
position is *critical* when swapping its token for the policy's best other token flips the outcome of the greedy
completion, compared with the greedy completion of the *unswapped* token. The null swap (keep the token, complete
greedily, compare with the sampled outcome) calibrates it: it measures how often greedy completion alone changes
the outcome, which a comparison with the sampled continuation would have counted as critical.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tito_audit.policy.model import VocabMap
from tito_audit.policy.sampler_distribution import mask_padding
from tito_audit.policy.view import View
from tito_audit.rl.sampling import GenerationSettings, generate

DEFINITION = (
    "outcome-flip test (this tool's operationalisation, not the paper's definition): swapping the token for the "
    "policy's best other token changes the parsed outcome of the greedy completion, against the greedy completion "
    "of the unswapped token"
)
GREEDY_BATCH = 16  # completions decoded together


@dataclass
class VerifiableTurn:
    """A sampled turn whose outcome can be checked: its span in the buffer and how to score a new text."""

    episode: int
    start: int
    end: int
    reward: float
    score: Callable[[list[int]], float]  # sampled ids of the turn -> reward


def certainty(entropy: float, vocab_size: int) -> float:
    """J = (log|V| - H) / log|V|: 1 for a one-hot reference, 0 for a uniform one over the full vocabulary."""
    hmax = math.log(vocab_size)
    return (hmax - entropy) / hmax


def certainty_table(
    entropy_ref: dict[tuple[int, int], float], vocab_size: int
) -> dict[tuple[int, int], dict[str, float]]:
    """Per (episode, position): J and dJ (J minus the mean J of the sequence's other trained positions)."""
    by_ep: dict[int, dict[int, float]] = {}
    for (n, t), h in entropy_ref.items():
        by_ep.setdefault(n, {})[t] = certainty(h, vocab_size)
    out: dict[tuple[int, int], dict[str, float]] = {}
    for n, js in by_ep.items():
        total, count = sum(js.values()), len(js)
        for t, j in js.items():
            others = (total - j) / (count - 1) if count > 1 else j
            out[(n, t)] = {"J": j, "dJ": j - others}
    return out


@torch.no_grad()
def _alternatives(policy: Any, vmap: VocabMap, prefixes: Sequence[list[int]], exclude: Sequence[int]) -> list[int]:
    """The policy's most probable token after each prefix, other than ``exclude`` (tokenizer ids)."""
    device = next(policy.parameters()).device
    out = []
    for prefix, tok in zip(prefixes, exclude, strict=True):
        ids = torch.tensor([vmap.to_model(prefix)], device=device)
        logits = mask_padding(
            policy(input_ids=ids, logits_to_keep=1, use_cache=False).logits[0, -1].float(), vmap.valid
        )
        if vmap.unk is not None:
            logits[vmap.unk] = float("-inf")
        logits[vmap.to_model([tok])[0]] = float("-inf")
        out.append(vmap.to_tok([int(logits.argmax())])[0])
    return out


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


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
    vocab_size: int,
    beta: float = 150.0,
) -> dict[str, Any]:
    """At up to ``budget`` positions of verifiable turns: keep and swap, complete both greedily, re-score.
    ``vocab_size``: the tokenizer's full vocabulary, for J."""
    cands = [(n, t) for n, vt in enumerate(turns) for t in range(max(vt.start, 1), vt.end)]
    chosen = sorted(rng.sample(cands, min(budget, len(cands))))
    stops = set(stop_ids)
    table = certainty_table(entropy_ref, vocab_size)
    kept_tok = [buffers[turns[n].episode].ids[t] for n, t in chosen]
    alts = _alternatives(policy, vmap, [buffers[turns[n].episode].ids[:t] for n, t in chosen], kept_tok)
    # Both continuations of every position, decoded greedily in batches (a stop token needs no continuation).
    jobs: list[tuple[int, str, list[int], int]] = []
    for k, ((n, t), y, alt) in enumerate(zip(chosen, kept_tok, alts, strict=True)):
        vt, buf = turns[n], buffers[turns[n].episode]
        room = max(1, max_new - (t - vt.start) - 1)
        for kind, tok in (("keep", y), ("swap", alt)):
            if tok not in stops:
                jobs.append((k, kind, [*buf.ids[:t], tok], room))
    tails: dict[tuple[int, str], list[int]] = {}
    for i in range(0, len(jobs), GREEDY_BATCH):
        part = jobs[i : i + GREEDY_BATCH]
        outs = generate(
            policy,
            vmap,
            [j[2] for j in part],
            stop_ids,
            GenerationSettings(),
            None,
            greedy=True,
            max_new=[j[3] for j in part],
        )
        for (k, kind, _, _), (ids, _) in zip(part, outs, strict=True):
            tails[(k, kind)] = ids
    rows: list[dict[str, Any]] = []
    for k, ((n, t), y, alt) in enumerate(zip(chosen, kept_tok, alts, strict=True)):
        vt, buf = turns[n], buffers[turns[n].episode]
        head = buf.ids[vt.start : t]
        keep_reward = vt.score([*head, y, *tails.get((k, "keep"), [])])
        swap_reward = vt.score([*head, alt, *tails.get((k, "swap"), [])])
        cert = table.get((vt.episode, t), {})
        j = cert.get("J")
        rows.append(
            {
                "episode": vt.episode,
                "position": t,
                "token": texts([y])[0],
                "alternative": texts([alt])[0],
                "critical": swap_reward != keep_reward,
                "null_flip": keep_reward != vt.reward,
                "J": j,
                "dJ": cert.get("dJ"),
                "kl_weight": j**beta if j is not None else None,
            }
        )
    crit = [r for r in rows if r["critical"]]
    rest = [r for r in rows if not r["critical"]]
    return {
        "definition": DEFINITION,
        "verifiable_turns": len(turns),
        "tested_positions": len(rows),
        "critical": len(crit),
        "critical_fraction": len(crit) / len(rows) if rows else None,
        "null_flips": sum(r["null_flip"] for r in rows),
        "vocab_size": vocab_size,
        "beta": beta,
        "J_mean_critical": _mean([r["J"] for r in crit]),
        "J_mean_other": _mean([r["J"] for r in rest]),
        "dJ_mean_critical": _mean([r["dJ"] for r in crit]),
        "dJ_mean_other": _mean([r["dJ"] for r in rest]),
        "kl_weight_mean_critical": _mean([r["kl_weight"] for r in crit]),
        "kl_weight_mean_other": _mean([r["kl_weight"] for r in rest]),
        "examples": crit[:8],
        "tested": [(r["episode"], r["position"], r["critical"]) for r in rows],
    }
