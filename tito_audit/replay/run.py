"""Replay a whole log: stream records, analyse episodes in worker processes, aggregate in order.

Workers are forked after the tokenizer is loaded (shared copy-on-write, as ``scan`` does) and get chunks of
records; at most ``2 * workers`` chunks are in flight, so memory stays constant however long the log is.
Results are aggregated in log order, so which findings are kept does not depend on scheduling.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tito_audit.replay.adapters import to_episodes
from tito_audit.replay.aggregate import ReplayTotals
from tito_audit.replay.analyze import EpisodeResult, ReplayContext, analyze
from tito_audit.replay.mapping import FieldMap
from tito_audit.replay.reader import RawLine, iter_records, parse_line
from tito_audit.replay.schema import RecordError

CHUNK = 32
Outcome = EpisodeResult | tuple[int, str]  # a result, or (line, why the record is malformed)

_WORKER: dict[str, Any] = {}


def replay_record(line: int, record: Any, ctx: ReplayContext, fmt: str, field_map: FieldMap | None) -> list[Outcome]:
    """Every episode of one record analysed, or the record's one malformed line."""
    if isinstance(record, RawLine):
        record = parse_line(record)
    if isinstance(record, RecordError):
        return [(line, str(record))]
    try:
        if field_map:
            record = field_map.apply(record)
        episodes = to_episodes(record, line, fmt)
    except RecordError as exc:
        return [(line, str(exc))]
    if not episodes:
        return [(line, "the record holds no episode")]
    return [analyze(ep, ctx) for ep in episodes]


def _init(ctx: ReplayContext, fmt: str, field_map: FieldMap | None) -> None:
    _WORKER.update(ctx=ctx, fmt=fmt, map=field_map)


def _chunk(items: list[tuple[int, Any]]) -> list[Outcome]:
    out: list[Outcome] = []
    for line, record in items:
        out.extend(replay_record(line, record, _WORKER["ctx"], _WORKER["fmt"], _WORKER["map"]))
    return out


def _chunks(path: Path, size: int, raw: bool = False) -> Iterator[list[tuple[int, Any]]]:
    batch: list[tuple[int, Any]] = []
    for item in iter_records(path, raw):
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def replay_log(
    path: Path,
    ctx: ReplayContext,
    *,
    fmt: str = "auto",
    field_map: FieldMap | None = None,
    workers: int = 1,
    on_records: Callable[[int], None] | None = None,
) -> ReplayTotals:
    """Totals over the whole log. ``workers <= 1`` runs here; ``LogError`` if the log cannot be opened."""
    totals = ReplayTotals()

    def take(outcomes: list[Outcome], n_records: int) -> None:
        lines_ok: set[int] = set()
        for o in outcomes:
            if isinstance(o, tuple):
                totals.add_malformed(*o)
            else:
                totals.add(o)
                lines_ok.add(o.line)
        totals.records += len(lines_ok)
        if on_records is not None:
            on_records(n_records)

    if workers <= 1:
        for batch in _chunks(path, CHUNK):
            take([o for line, rec in batch for o in replay_record(line, rec, ctx, fmt, field_map)], len(batch))
        return totals
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    pool = mp.get_context("fork").Pool(workers, initializer=_init, initargs=(ctx, fmt, field_map))
    try:
        pending: deque[tuple[Any, int]] = deque()
        for batch in _chunks(path, CHUNK, raw=True):  # workers parse the lines
            pending.append((pool.apply_async(_chunk, (batch,)), len(batch)))
            while len(pending) >= 2 * workers:
                res, n = pending.popleft()
                take(res.get(), n)
        while pending:
            res, n = pending.popleft()
            take(res.get(), n)
    finally:
        pool.terminate()
        pool.join()
    return totals
