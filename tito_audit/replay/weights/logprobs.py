"""The policy's logits at chosen positions of many sequences, in padded batches, with the model's own head.

Sequences are right-padded into one batch with an attention mask over the real ids (a causal model never lets a
real id see the padding after it), and the output layer runs only at the positions asked for: transformers'
``logits_to_keep`` takes a boolean (batch, length) mask and returns one row per kept position, so the model's own
head, soft-capping (Gemma-2) and logit scaling (Cohere, Granite) apply and no row is computed for nothing. A
transformers or a model that does not take that mask (probed once per model on a two-row batch, checked against
one sequence at a time) gets one sequence per forward, with a 1-D ``logits_to_keep``: the same numbers.
Batches are the default on an accelerator only: on a CPU one sequence already keeps the cores busy, so padding is
pure cost (padded batches ran at 0.38 to 0.51 x the speed of one sequence per forward,
``benchmarks/results/replay-weights.json``).

Batches are bounded by padded ids (activations) and by kept rows times the vocabulary (the logits), sorted by
length so that little padding is computed; log p is taken in float32 row chunks (``gradients.gather_log_softmax``).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tito_audit.policy.gradients import gather_log_softmax
from tito_audit.policy.model import VocabMap

MAX_BATCH_TOKENS = 1 << 14  # padded ids per forward
MAX_LOGIT_ELEMENTS = 1 << 26  # kept rows x vocabulary per forward (256 MB of float32 logits)

_PACKED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


@dataclass
class Row:
    """A sequence (tokenizer ids) and the positions j >= 1 whose log p(ids[j] | ids[:j]) is wanted."""

    ids: list[int]
    positions: list[int]


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _one(model: Any, vmap: VocabMap, row: Row) -> torch.Tensor:
    device = _device(model)
    ids = torch.tensor([vmap.to_model(row.ids)], device=device)
    keep = torch.tensor([j - 1 for j in row.positions], device=device, dtype=torch.long)
    return model(input_ids=ids, logits_to_keep=keep, use_cache=False).logits[0]


def _padded(model: Any, vmap: VocabMap, rows: Sequence[Row]) -> torch.Tensor:
    device = _device(model)
    width = max(len(r.ids) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.long)
    keep = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, r in enumerate(rows):
        ids[b, : len(r.ids)] = torch.tensor(vmap.to_model(r.ids))
        attention[b, : len(r.ids)] = 1
        keep[b, [j - 1 for j in r.positions]] = True
    out = model(
        input_ids=ids.to(device), attention_mask=attention.to(device), logits_to_keep=keep.to(device), use_cache=False
    ).logits
    if out.dim() != 2 or out.shape[0] != int(keep.sum()):
        raise ValueError(f"logits of shape {tuple(out.shape)} for {int(keep.sum())} kept positions")
    return out


@torch.no_grad()
def takes_packed_keep(model: Any, vmap: VocabMap) -> bool:
    """Whether ``model`` takes a boolean (batch, length) ``logits_to_keep``: a two-row probe against one row at a
    time (memoised per model)."""
    known = _PACKED.get(model)
    if known is not None:
        return known
    ids = vmap.to_tok(list(range(min(vmap.size, 4))))
    ok = False
    if len(ids) == 4:
        rows = [Row(ids, [1, 2]), Row(ids[:2], [1])]
        try:
            both = _padded(model, vmap, rows)
            alone = torch.cat([_one(model, vmap, r) for r in rows])
            scale = 1.0 + float(alone.float().abs().max())
            ok = both.shape == alone.shape and float((both.float() - alone.float()).abs().max()) <= 0.05 * scale
        except (TypeError, ValueError, IndexError, RuntimeError):
            ok = False
    _PACKED[model] = ok
    return ok


def batch_by_default(model: Any, vmap: VocabMap) -> bool:
    """Padded batches off the CPU, where the model takes them."""
    return _device(model).type != "cpu" and takes_packed_keep(model, vmap)


def batches(
    rows: Sequence[Row], vocab: int, max_tokens: int = MAX_BATCH_TOKENS, max_logits: int = MAX_LOGIT_ELEMENTS
) -> list[list[int]]:
    """Row indices per forward: longest first, each batch within both bounds (a row over them goes alone)."""
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].ids))
    out: list[list[int]] = []
    cur: list[int] = []
    kept = 0
    for i in order:
        n, k = len(rows[i].ids), len(rows[i].positions)
        width = len(rows[cur[0]].ids) if cur else n
        if cur and ((len(cur) + 1) * width > max_tokens or (kept + k) * vocab > max_logits):
            out.append(cur)
            cur, kept = [], 0
        cur.append(i)
        kept += k
    if cur:
        out.append(cur)
    return out


@torch.no_grad()
def logits_at(
    model: Any, vmap: VocabMap, rows: Sequence[Row], *, batched: bool | None = None, **bounds: int
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """``(row indices, logits)`` per forward: the logits of every kept position of those rows, in row order then
    position order (the model's dtype, on its device). ``batched=None``: ``batch_by_default``; False: one row
    per forward."""
    live = [i for i, r in enumerate(rows) if r.positions]
    if batched is None:
        batched = batch_by_default(model, vmap)
    if not batched:
        for i in live:
            yield [i], _one(model, vmap, rows[i])
        return
    sub = [rows[i] for i in live]
    for group in batches(sub, vmap.size, **bounds):
        yield [live[g] for g in group], _padded(model, vmap, [sub[g] for g in group])


@torch.no_grad()
def row_logps(model: Any, vmap: VocabMap, rows: Sequence[Row], **kw: Any) -> list[torch.Tensor]:
    """float32 log p at each row's positions (host tensors, one per row, in ``rows`` order)."""
    out = [torch.zeros(0) for _ in rows]
    for idx, logits in logits_at(model, vmap, rows, **kw):
        y = torch.tensor([t for i in idx for t in vmap.to_model([rows[i].ids[j] for j in rows[i].positions])])
        lp = gather_log_softmax(logits, y.to(logits.device)).cpu()
        at = 0
        for i in idx:
            n = len(rows[i].positions)
            out[i] = lp[at : at + n]
            at += n
    return out
