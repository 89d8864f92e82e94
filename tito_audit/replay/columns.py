"""The TITO check on Arrow columns: a Parquet batch of native records checked without making Python objects.

For records that carry the engine's ``prompt_ids`` the check needs ids only (``tito_audit.replay.engine``):
every prompt extends the previous prompt plus its samples, the trained sequence starts with the last prompt plus
its samples, the loss mask is 1 on exactly the samples. Here it runs on the batch's Arrow buffers: each list
column is one bytes object of int64 ids and an offsets array, and each comparison is one ``bytes`` slice
comparison (memcmp). Rows it decides are exact count without being converted; any other row (a divergence, a
null, a missing field) goes through ``analyze`` like a JSONL record, so findings are the same either way.

Only used when an exact episode needs nothing else (``ReplayContext`` with what-if, drift and the non-canonical
check off, or no messages to render): otherwise each row is analysed whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_NEEDED = ("turns", "input_ids", "loss_mask")


@dataclass
class ExactRows:
    """Which rows of a batch are exact, and what ``ReplayTotals`` counts for them."""

    exact: Any  # numpy bool per row
    turns: Any  # numpy int per row: sampled turns
    sampled: Any  # numpy int per row: sampled ids
    stop_turns: Any  # numpy int per row: turns ending with a stop id
    marks: Any  # numpy bool per row: the ids open with a control id of the template
    max_id: Any  # numpy int per row: the largest id in input_ids and the sampled turns (-1: none)


def _list(arr: Any) -> tuple[Any, bytes, Any] | None:
    """(absolute offsets, int64 values as bytes, values as numpy) of a list<int> column; None if it holds nulls
    inside the lists or is not a list of integers."""
    import pyarrow as pa

    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        return None
    values = arr.values
    if not pa.types.is_integer(values.type) or values.null_count:
        return None
    v = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.asarray(arr.offsets, dtype=np.int64), v.tobytes(), v


def _per_row(per_item: Any, offsets: Any, reduce: Any, empty: Any) -> Any:
    """``reduce`` of ``per_item`` over each row's item range; ``empty`` for rows with no item."""
    n = len(offsets) - 1
    out = np.full(n, empty, dtype=per_item.dtype if len(per_item) else np.int64)
    starts, ends = offsets[:-1], offsets[1:]
    has = ends > starts
    if has.any() and len(per_item):
        out[has] = reduce.reduceat(per_item, starts[has])
    return out


def _opening(values: Any, offsets: Any, window: int) -> Any:
    """Each row's first ``window`` ids (-1 past a row's end), as a rows x window array."""
    starts, ends = offsets[:-1], offsets[1:]
    idx = starts[:, None] + np.arange(window)[None, :]
    inside = idx < ends[:, None]
    out = np.full(idx.shape, -1, dtype=np.int64)
    if len(values):
        out[inside] = values[idx[inside]]
    return out


def exact_rows(
    batch: Any, stop_ids: Any, marks: Any, window: int, headers: Any = frozenset(), openers: Any = frozenset()
) -> ExactRows | None:
    """The engine-prompt TITO check for every row of ``batch`` (a pyarrow RecordBatch of native records); None
    when the batch's columns are not the native ones with ``turns[].prompt_ids``. ``marks`` within the first
    ``window`` ids and ``stop_ids`` at the end of turns are counted for the tokenizer fit (``run.mismatch``).

    A row whose ids agree can still train environment ids logged as sampled (``replay.environment``): a row with a
    sampled turn that holds a stop before its last id, a header id (``headers``, ``ReplayContext.header_ids``) or
    opens with a message's control id (``openers``, from ``ReplayContext.openings``) is left to ``analyze``, which
    reads those ids as the JSONL path does; so is a row with a turn that does not end with a stop id."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = batch.schema.names
    if any(n not in names for n in _NEEDED):
        return None
    turns_col = batch.column("turns")
    if not pa.types.is_list(turns_col.type) or not pa.types.is_struct(turns_col.type.value_type):
        return None
    struct = turns_col.values
    fields = {struct.type.field(i).name: child for i, child in enumerate(struct.flatten())}
    if "ids" not in fields or "prompt_ids" not in fields:
        return None
    got, ids, prompts, mask = (
        _list(batch.column("input_ids")), _list(fields["ids"]), _list(fields["prompt_ids"]),
        _list(batch.column("loss_mask")),
    )  # fmt: skip
    if got is None or ids is None or prompts is None or mask is None:
        return None
    n = batch.num_rows
    t_off = np.asarray(turns_col.offsets, dtype=np.int64)
    in_off, b_in, v_in = got
    id_off, b_ids, v_ids = ids
    pr_off, b_pr, _ = prompts
    m_off, _, v_mask = mask
    binary = bool(((v_mask == 0) | (v_mask == 1)).all())
    b_mask = v_mask.astype(np.uint8).tobytes() if binary else b""
    # rows the bytes check cannot decide: nulls anywhere, or mask values other than 0/1 (left to analyze)
    bad_turn = (
        np.asarray(struct.is_null(), dtype=bool)
        | np.asarray(fields["ids"].is_null(), dtype=bool)
        | np.asarray(fields["prompt_ids"].is_null(), dtype=bool)
    )
    if "logprobs" in fields:  # a length mismatch is a shape finding, a null or a string a malformed record: analyze
        lp = fields["logprobs"]
        null_inside = _null_inside(lp)
        if null_inside is None:  # not lists of numbers
            bad_turn |= ~np.asarray(lp.is_null(), dtype=bool)
        else:
            lp_len = np.asarray(pc.list_value_length(lp).fill_null(-1), dtype=np.int64)
            bad_turn |= ((lp_len >= 0) & (lp_len != np.diff(id_off))) | null_inside | _impossible(lp)
    bad_turn |= _environment_evidence(v_ids, id_off, stop_ids, headers, openers)
    undecidable = (
        np.asarray(turns_col.is_null(), dtype=bool)
        | np.asarray(batch.column("input_ids").is_null(), dtype=bool)
        | np.asarray(batch.column("loss_mask").is_null(), dtype=bool)
        | (_per_row(bad_turn.astype(np.int64), t_off, np.add, 0) > 0)
        | (t_off[1:] == t_off[:-1])
        | (not binary)
        # a negative id is refused by the record's reader (schema._ids): such a row is left to analyze. Only
        # input_ids need looking at: in an exact row every prompt and every sampled id is a slice of them
        | _negative(v_in, in_off)
    )
    turn_len = np.diff(id_off)
    sampled = _per_row(turn_len, t_off, np.add, 0)
    undecidable |= sampled == 0  # nothing sampled: analyze names the episode as not checked
    undecidable |= ~_context_valid(batch, np.diff(t_off), undecidable)
    last_id = np.where(turn_len > 0, v_ids[np.maximum(id_off[1:] - 1, 0)] if len(v_ids) else -1, -1)
    stops = np.isin(last_id, np.asarray(list(stop_ids), dtype=np.int64)) & (turn_len > 0)
    # a turn ending without a stop: ``analyze`` looks for the stop after it, untrained (``stops_never_trained``)
    undecidable |= _per_row((~stops).astype(np.int64), t_off, np.add, 0) > 0
    max_turn = _per_row(np.where(turn_len > 0, _per_row(v_ids, id_off, np.maximum, -1), -1), t_off, np.maximum, -1)
    opening = _opening(v_in, in_off, window)
    has_mark = np.isin(opening, np.asarray(sorted(marks), dtype=np.int64)).any(axis=1) if marks else None
    out = ExactRows(
        exact=np.zeros(n, dtype=bool),
        turns=np.diff(t_off),
        sampled=sampled,
        stop_turns=_per_row(stops.astype(np.int64), t_off, np.add, 0),
        marks=has_mark if has_mark is not None else np.ones(n, dtype=bool),
        max_id=np.maximum(_per_row(v_in, in_off, np.maximum, -1), max_turn),
    )
    for r in range(n):
        if not undecidable[r]:
            out.exact[r] = _exact_row(r, t_off, pr_off, id_off, in_off, m_off, b_pr, b_ids, b_in, b_mask)
    return out


def _environment_evidence(values: Any, offsets: Any, stop_ids: Any, headers: Any, openers: Any) -> Any:
    """Per sampled turn, whether its ids hold what ``replay.environment`` reads as the environment's: a stop id
    before the last id, a header id, or a first id that opens a message (numpy bool)."""
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    found = np.zeros(n, dtype=bool)
    if not len(values):
        return found
    stops = np.isin(values, np.asarray(sorted(stop_ids), dtype=np.int64))
    stops[offsets[1:][lengths > 0] - 1] = False  # a turn's last id is where its stop belongs
    inside = stops | np.isin(values, np.asarray(sorted(headers), dtype=np.int64))
    found |= _per_row(inside.astype(np.int64), offsets, np.add, 0) > 0
    if openers:
        first = np.where(lengths > 0, values[np.minimum(offsets[:-1], len(values) - 1)], -1)
        found |= np.isin(first, np.asarray(sorted(openers), dtype=np.int64))
    return found


def _null_inside(lp: Any) -> Any:
    """Per turn, whether its log-prob list holds a null (numpy bool); None when the lists do not hold numbers."""
    import pyarrow as pa

    if not (pa.types.is_list(lp.type) or pa.types.is_large_list(lp.type)):
        return None
    values = lp.values
    if not (pa.types.is_floating(values.type) or pa.types.is_integer(values.type)):
        return None
    offsets = np.asarray(lp.offsets, dtype=np.int64)
    if not values.null_count:
        return np.zeros(len(offsets) - 1, dtype=bool)
    nulls = np.asarray(values.is_null(), dtype=np.int64)
    return _per_row(nulls, offsets, np.add, 0) > 0


def _impossible(lp: Any) -> Any:
    """Per turn, whether a log-prob is NaN, infinite or above 0 (``schema._floats`` refuses the record: analyze)."""
    from tito_audit.rollout.tokens import LOGPROB_ROUNDING

    raw = lp.values
    values = np.asarray(raw.fill_null(0) if raw.null_count else raw, dtype=np.float64)  # no copy for doubles
    offsets = np.asarray(lp.offsets, dtype=np.int64)
    # NaN and +inf fail the first comparison, -inf the second
    if not len(values) or (bool((values <= LOGPROB_ROUNDING).all()) and values.min() > -np.inf):
        return np.zeros(len(offsets) - 1, dtype=bool)
    bad = ~np.isfinite(values) | (values > LOGPROB_ROUNDING)
    return _per_row(bad.astype(np.int64), offsets, np.add, 0) > 0


def _negative(values: Any, offsets: Any) -> Any:
    """Per list, whether it holds a negative value (one pass over the values when none does)."""
    if not len(values) or values.min() >= 0:
        return np.zeros(len(offsets) - 1, dtype=bool)
    return _per_row((values < 0).astype(np.int64), offsets, np.add, 0) > 0


_CONTEXT = ("messages", "tools", "chat_template_kwargs", "date")


def _context_valid(batch: Any, turns: Any, skip: Any) -> Any:
    """Per row, whether its ``messages``, ``tools``, ``chat_template_kwargs`` and ``date`` pass the record's own
    validation (``schema.context_fields``): a row the JSONL reader would refuse is never counted exact here. Only
    rows that hold one of them and are not ``skip`` (already left to analyze) are converted, one column at a time."""
    from tito_audit.replay.schema import RecordError, context_fields

    n = batch.num_rows
    ok = np.ones(n, dtype=bool)
    present = [name for name in _CONTEXT if name in batch.schema.names]
    if not present:
        return ok
    columns = {name: batch.column(name) for name in present}
    held = np.zeros(n, dtype=bool)
    for col in columns.values():
        held |= ~np.asarray(col.is_null(), dtype=bool)
    for r in np.flatnonzero(held & ~skip).tolist():
        record = {name: col[r].as_py() for name, col in columns.items()}
        try:
            context_fields(record, int(turns[r]))
        except RecordError:
            ok[r] = False
    return ok


def _exact_row(
    r: int, t_off: Any, pr_off: Any, id_off: Any, in_off: Any, m_off: Any,
    b_pr: bytes, b_ids: bytes, b_in: bytes, b_mask: bytes,
) -> bool:  # fmt: skip
    """``engine.exact`` on one row's buffers (positions in ids; bytes offsets are 8 per id, 1 per mask value)."""
    runs: list[tuple[int, int]] = []
    p0 = p1 = i0 = i1 = 0
    for k in range(int(t_off[r]), int(t_off[r + 1])):
        q0, q1, j0, j1 = int(pr_off[k]), int(pr_off[k + 1]), int(id_off[k]), int(id_off[k + 1])
        if k > t_off[r]:
            n, m = p1 - p0, i1 - i0
            if q1 - q0 < n + m or b_pr[8 * q0 : 8 * (q0 + n)] != b_pr[8 * p0 : 8 * p1]:
                return False
            if b_pr[8 * (q0 + n) : 8 * (q0 + n + m)] != b_ids[8 * i0 : 8 * i1]:
                return False
        a, b = q1 - q0, q1 - q0 + j1 - j0
        if b > a:
            if runs and runs[-1][1] == a:
                runs[-1] = (runs[-1][0], b)
            else:
                runs.append((a, b))
        p0, p1, i0, i1 = q0, q1, j0, j1
    g0, g1 = int(in_off[r]), int(in_off[r + 1])
    n, m = p1 - p0, i1 - i0
    if g1 - g0 < n + m or b_in[8 * g0 : 8 * (g0 + n)] != b_pr[8 * p0 : 8 * p1]:
        return False
    if b_in[8 * (g0 + n) : 8 * (g0 + n + m)] != b_ids[8 * i0 : 8 * i1]:
        return False
    m0, m1 = int(m_off[r]), int(m_off[r + 1])
    if m1 - m0 != g1 - g0:
        return False
    found: list[tuple[int, int]] = []
    pos = b_mask.find(1, m0, m1)
    while pos != -1:
        end = b_mask.find(0, pos, m1)
        end = m1 if end == -1 else end
        found.append((pos - m0, end - m0))
        if len(found) > len(runs):
            return False
        pos = b_mask.find(1, end, m1)
    return found == runs
