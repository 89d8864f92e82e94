"""One episode of a training batch as loops hold it, read under whichever names the loop uses.

Shared by the run-time guard (``check_batch``) and ``LogWriter.write``, so that both read the same item the same
way and neither drops a field it does not know: per-turn sampled ids under ``sampled`` or ``turns`` (each a list
of ids or ``{"ids", "logprobs"?, "prompt_ids"?}``), per-turn ``prompt_ids`` also beside them, ``input_ids``, and
the loss mask under any of the names loops give it:

- ``loss_mask`` or ``mask``: 0/1 per position of ``input_ids``;
- ``labels`` (Hugging Face): ``input_ids`` with ``-100`` where no loss is taken, unshifted (the model shifts);
  the mask is ``labels != -100``, and a trained label that is not the id at its place is a problem;
- ``response_mask`` (verl): the mask over the response, the last ``len(response_mask)`` positions of ``input_ids``
  (the prompt before it is not trained).

``attention_mask`` drops padding (positions where it is 0) from the ids and the mask, unless the mask trains
them: a padded position with a loss (labels not ``-100``, mask 1) is kept, so that it is found as trained and never
sampled (by the guard, and in the log ``LogWriter`` writes). Padding sits at a sequence's ends: a 0 between two
attended positions hides a real token from every later one, and is a problem (the guard fails, ``LogWriter``
refuses the record). When several mask names are given they must agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.replay.schema import SampledTurn

IGNORE_INDEX = -100  # Hugging Face's label for "no loss here"
MASK_FIELDS = ("loss_mask", "mask", "labels", "response_mask")
TURN_FIELDS = ("sampled", "turns")
_BINARY = frozenset((0, 1))
ALIASES = ("sampled", "mask", "labels", "response_mask", "attention_mask", "prompt_ids")  # beyond the native names


class BatchItemError(ValueError):
    """An item that cannot be read at all (a required field missing, or of the wrong kind); names the field."""


@dataclass
class BatchItem:
    turns: list[SampledTurn]
    input_ids: list[int]
    loss_mask: list[int] | None  # None: no mask under any name
    mask_source: str | None = None  # the name the mask came from (several: the first of MASK_FIELDS given)
    problems: list[tuple[int | None, str]] = field(default_factory=list)  # (trained position or None, message)


def ints(x: Any) -> list[int]:
    """A list of ints from a list, tuple, numpy array or tensor (a list of ints is returned as it is)."""
    if type(x) is list and (not x or type(x[0]) is int):  # what JSON and most loops give: no copy, no ABC check
        return x
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, (str, bytes)) or not isinstance(x, Sequence):
        raise BatchItemError(f"expected a list of integers, not {type(x).__name__}")
    if isinstance(x, list) and (not x or type(x[0]) is int):
        return x
    bad = next((v for v in x if isinstance(v, float) and not v.is_integer()), None)  # NaN, inf, 1.5
    if bad is not None:
        raise BatchItemError(f"expected integers, found {bad}")
    try:
        return [int(v) for v in x]
    except (TypeError, ValueError) as exc:
        raise BatchItemError(f"expected integers ({exc})") from None


def _turns(item: Mapping[str, Any]) -> list[SampledTurn]:
    given = [k for k in TURN_FIELDS if item.get(k) is not None]
    if not given:
        raise BatchItemError("no 'sampled' (per-turn sampled ids, as the engine returned them)")
    raw = item[given[0]]
    if len(given) > 1 and raw is not item[given[1]] and _turn_ids(raw) != _turn_ids(item[given[1]]):
        raise BatchItemError("'sampled' and 'turns' are both given and differ")
    if hasattr(raw, "tolist"):
        raw = raw.tolist()
    turns = []
    for k, t in enumerate(raw):
        if type(t) is not list and isinstance(t, Mapping):
            if "ids" not in t:
                raise BatchItemError(f"{given[0]}[{k}] has no 'ids'")
            lps: Any = t.get("logprobs")  # as given (a tensor as a list): the schema validates it where it is written
            prompt = t.get("prompt_ids")
            lps = lps.tolist() if hasattr(lps, "tolist") else lps
            turns.append(SampledTurn(ints(t["ids"]), lps, ints(prompt) if prompt is not None else None))
        else:
            turns.append(SampledTurn(ints(t)))
    prompts = item.get("prompt_ids")
    if prompts is not None:
        prompts = prompts.tolist() if hasattr(prompts, "tolist") else list(prompts)
        if len(prompts) != len(turns) or any(isinstance(p, int) for p in prompts):
            raise BatchItemError(
                f"prompt_ids: give one list per sampled turn ({len(turns)}), the context the engine was given for it"
            )
        for turn, p in zip(turns, prompts, strict=True):
            if p is not None:
                mine = ints(p)
                if turn.prompt_ids is not None and turn.prompt_ids != mine:
                    raise BatchItemError("prompt_ids beside the turns differ from the turns' own prompt_ids")
                turn.prompt_ids = mine
    return turns


def _plain(x: Any) -> Any:
    return x.tolist() if hasattr(x, "tolist") else x


def _turn_ids(raw: Any) -> list[Any]:
    """The sampled ids per turn, whether given as id lists (``sampled``) or as native turns (``turns``)."""
    return [_plain(t.get("ids")) if isinstance(t, Mapping) else _plain(t) for t in _plain(raw)]


def _masks(item: Mapping[str, Any], ids: list[int]) -> tuple[dict[str, list[int]], list[tuple[int | None, str]]]:
    """Each mask given, as 0/1 over ``ids`` (padding still in), and the problems found reading them."""
    masks: dict[str, list[int]] = {}
    problems: list[tuple[int | None, str]] = []
    n = len(ids)
    for name in MASK_FIELDS:
        raw = item.get(name)
        if raw is None:
            continue
        values = ints(raw)
        if name == "labels":
            if len(values) != n:
                problems.append((None, f"labels has {len(values)} values for {n} input_ids"))
                continue
            mask = [0 if v == IGNORE_INDEX else 1 for v in values]
            pairs = enumerate(zip(values, ids, strict=True))
            wrong = next((i for i, (v, t) in pairs if v != IGNORE_INDEX and v != t), None)
            if wrong is not None:
                message = (
                    f"labels train id {values[wrong]} at token {wrong} where input_ids has {ids[wrong]} "
                    "(labels must be input_ids with -100 where no loss is taken, not shifted)"
                )
                problems.append((wrong, message))
        elif name == "response_mask":
            if len(values) > n:
                problems.append((None, f"response_mask has {len(values)} values for {n} input_ids"))
                continue
            mask = [0] * (n - len(values)) + values
        elif len(values) != n:
            problems.append((None, f"{name} has {len(values)} values for {n} input_ids"))
            continue
        else:
            mask = values
        if mask.count(0) + mask.count(1) != len(mask):  # two C-level passes, no set built
            bad = next(v for v in mask if v not in _BINARY)
            problems.append((None, f"{name} must hold 0/1 (found {bad})"))
            continue
        masks[name] = mask
    names = list(masks)
    for other in names[1:]:
        if masks[other] != masks[names[0]]:
            at = next(i for i, (a, b) in enumerate(zip(masks[names[0]], masks[other], strict=True)) if a != b)
            problems.append((at, f"{names[0]} and {other} disagree at token {at}: which one does the loss use?"))
    return masks, problems


def _attention_hole(flags: Sequence[int]) -> int | None:
    """The first position whose ``attention_mask`` is 0 between two attended ones, or None. Padding sits at a
    sequence's ends; a 0 inside it hides a real token from every later position (a loop that sets ``pad_token =
    eos_token`` and masks ``ids != pad_token_id`` hides each sampled stop token the same way)."""
    first = next((i for i, a in enumerate(flags) if a), None)
    if first is None:
        return None
    last = max(i for i, a in enumerate(flags) if a)
    return next((i for i in range(first, last) if not flags[i]), None)


def _hole_message(at: int, token: int, trained: bool) -> str:
    what = "a trained id" if trained else "an id"
    return (
        f"attention_mask hides {what} ({token}) at token {at}, inside the sequence: every later position is computed "
        "without it, a context the engine never had (padding set to the eos id? build the mask from the lengths, "
        "not from ids != pad_token_id)"
    )


def read_item(item: Mapping[str, Any]) -> BatchItem:
    """The item's turns, trained ids (padding dropped) and loss mask; ``BatchItemError`` when it cannot be read."""
    if not isinstance(item, Mapping):
        raise BatchItemError(f"a batch item is a mapping, a Trajectory or an Episode, not {type(item).__name__}")
    turns = _turns(item)
    if item.get("input_ids") is None:
        raise BatchItemError("no 'input_ids' (the ids the trainer trains on)")
    ids = ints(item["input_ids"])
    masks, problems = _masks(item, ids)
    source = next(iter(masks), None)
    mask = masks.get(source) if source is not None else None
    attention = item.get("attention_mask")
    if attention is not None:  # padded tensors: keep the real positions
        keep_flags = ints(attention)
        if len(keep_flags) != len(ids):
            problems.append((None, f"attention_mask has {len(keep_flags)} values for {len(ids)} input_ids"))
        else:
            hole = _attention_hole(keep_flags)
            if hole is not None:
                problems.append((hole, _hole_message(hole, ids[hole], mask is not None and bool(mask[hole]))))
            # a padded position the loss still trains (HF labels not -100 there: the loss ignores only -100, never
            # attention_mask) is kept, so that it is compared as trained and never sampled, and written to the log
            keep = [i for i, a in enumerate(keep_flags) if a or (mask is not None and mask[i])]
            ids = [ids[i] for i in keep]
            mask = [mask[i] for i in keep] if mask is not None else None
    if mask is None and any(item.get(k) is not None for k in MASK_FIELDS):
        source = next(k for k in MASK_FIELDS if item.get(k) is not None)  # given but unreadable: a problem above
    return BatchItem(turns, ids, mask, source, problems)


def native_record(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A native record with the batch names (``sampled``, ``mask``, ``labels``, ``response_mask``,
    ``attention_mask``, ``prompt_ids`` beside the turns) resolved onto the native ones; the record itself when it
    uses none. ``BatchItemError`` for an alias that cannot be read or a mask problem (a record must not be written
    with a mask other than the one the loop trains with)."""
    if not any(k in record for k in ALIASES):
        return record
    item = read_item(record)
    if item.problems:
        raise BatchItemError(item.problems[0][1])
    out = {k: v for k, v in record.items() if k not in ALIASES and k not in MASK_FIELDS and k != "turns"}
    out["turns"] = [
        {k: v for k, v in (("ids", t.ids), ("logprobs", t.logprobs), ("prompt_ids", t.prompt_ids)) if v is not None}
        for t in item.turns
    ]
    out["input_ids"] = item.input_ids
    if item.loss_mask is not None:
        out["loss_mask"] = item.loss_mask
    return out
