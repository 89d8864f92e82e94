"""Replay whole logs: stream records, analyse episodes (here, in worker processes, or on Ray), aggregate in order.

The unit of work is a part of a log: a chunk of JSONL lines (``replay_lines``) or a Parquet batch
(``replay_batch``), each giving ``ReplayTotals`` that merge in log order, so the report does not depend on who
did the work or when. Workers (``tito_audit.workers``) are forked after the tokenizer is loaded (shared copy-on-write)
and get chunks of lines or Parquet row groups; at most ``2 * workers`` are in flight, so memory stays constant
however long the log is. ``tito_audit.replay.distributed`` maps ``replay_batch`` over Parquet shards with Ray.

A log written with another tokenizer is refused early (``TokenizerMismatch``): its records hold ids outside this
tokenizer, or neither the template's control tokens nor its stop tokens where a log of this model has them. In a
log that fits, each episode is held to the same test (``analyze``): one that does not read as this tokenizer is
not checked, named in ``replay_incomplete``, never replayed as mojibake.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tito_audit.replay.adapters import to_episodes
from tito_audit.replay.aggregate import Malformed, ReplayTotals
from tito_audit.replay.analyze import MARK_WINDOW, EpisodeResult, ReplayContext, analyze
from tito_audit.replay.columns import exact_rows
from tito_audit.replay.environment import LONG
from tito_audit.replay.mapping import FieldMap
from tito_audit.replay.reader import (
    MAX_RECORD_BYTES,
    PARQUET_BATCH,
    LogError,
    UncheckedTail,
    UnreadableParquet,
    expand,
    iter_lines,
    log_kind,
    open_parquet,
    oversized,
    parquet_batches,
    parse_line,
    row_nbytes,
)
from tito_audit.replay.schema import RecordError
from tito_audit.workers import Died, Done, Killed, Raised, WorkerPool, interrupt, reraise

CHUNK = 32
FIT_SAMPLE = 32  # episodes read before deciding that the log does not fit the tokenizer
Outcome = EpisodeResult | Malformed

_WORKER: dict[str, Any] = {}


class TokenizerMismatch(LogError):
    """The log was written with another tokenizer than the model's (exit 2)."""


def replay_record(
    line: int, record: Any, ctx: ReplayContext, fmt: str, field_map: FieldMap | None, file: str = ""
) -> list[Outcome]:
    """Every episode of one record analysed, or the record's one malformed line."""
    if isinstance(record, bytes):  # a JSONL line, parsed here (in the worker)
        record = parse_line(record)
    if isinstance(record, RecordError):
        return [Malformed(line, str(record), file, unchecked_tail=isinstance(record, UncheckedTail))]
    try:
        if field_map:
            record = field_map.apply(record)
        episodes = to_episodes(record, line, fmt)
    except RecordError as exc:
        return [Malformed(line, str(exc), file)]
    if not episodes:
        return [Malformed(line, "the record holds no episode", file)]
    for ep in episodes:
        ep.file = file
        try:
            ctx.check_ids(ep)
        except RecordError as exc:
            return [Malformed(line, str(exc), file, out_of_vocabulary=True)]
    return [analyze(ep, ctx) for ep in episodes]


def totals_of(outcomes: Sequence[Outcome]) -> ReplayTotals:
    """The totals of one part of a log; a line holding several episodes counts as one record."""
    t = ReplayTotals()
    lines_ok: set[int] = set()
    for o in outcomes:
        if isinstance(o, Malformed) and o.unchecked_tail:
            t.add_unchecked_tail(o.line, o.message, o.file)
        elif isinstance(o, Malformed):
            t.add_malformed(o.line, o.message, o.file, o.out_of_vocabulary)
        else:
            t.add(o)
            lines_ok.add(o.line)
    t.records += len(lines_ok)
    return t


def replay_lines(
    items: Sequence[tuple[int, Any]], ctx: ReplayContext, fmt: str, field_map: FieldMap | None, file: str = ""
) -> ReplayTotals:
    return totals_of([o for line, rec in items for o in replay_record(line, rec, ctx, fmt, field_map, file)])


def replay_batch(
    batch: Any,
    first_line: int,
    ctx: ReplayContext,
    fmt: str = "auto",
    field_map: FieldMap | None = None,
    file: str = "",
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> ReplayTotals:
    """One Arrow batch of a Parquet log (rows numbered from ``first_line``). Rows over the bound are malformed;
    with engine prompts and nothing else to measure, exact rows are decided on the Arrow buffers
    (``columns.exact_rows``) and the others analysed like JSONL records."""
    import numpy as np

    sizes = row_nbytes(batch)
    small = sizes <= max_record_bytes
    fast = None
    needs_more = ctx.noncanonical or (("messages" in batch.schema.names) and (ctx.whatif or ctx.drift))
    if fmt in ("auto", "native") and not field_map and not needs_more:
        openers = frozenset().union(*(headers for headers, _end in ctx.openings))
        fast = exact_rows(batch, ctx.stop_ids, ctx.marks, MARK_WINDOW, ctx.header_ids, openers)
    vocab = ctx.vocab_size if ctx.vocab_size is not None else 1 << 62
    if fast is not None:  # a row of another tokenizer is not exact: ``analyze`` refuses it
        exact = small & fast.exact & (fast.max_id < vocab) & (fast.marks | (fast.stop_turns > 0))
    else:
        exact = np.zeros(batch.num_rows, dtype=bool)
    outcomes: list[Outcome] = []
    for k in np.flatnonzero(~exact).tolist():
        line = first_line + k
        too_big = oversized(int(sizes[k]), max_record_bytes)
        if too_big is not None:
            outcomes.append(Malformed(line, str(too_big), file))
        else:
            row = batch.slice(k, 1).to_pylist()[0]
            outcomes.extend(replay_record(line, row, ctx, fmt, field_map, file))
    totals = totals_of(outcomes)
    if fast is not None and exact.any():  # what ``ReplayTotals.add`` counts for an exact episode, for all at once
        n = int(exact.sum())
        sampled = int(fast.sampled[exact].sum())
        totals.records += n
        totals.episodes += n
        totals.by_source["native"] += n
        totals.reference_engine += n
        totals.turns += int(fast.turns[exact].sum())
        totals.sampled_tokens += sampled
        totals.trained_tokens += sampled
        totals.mark_episodes += int(fast.marks[exact].sum())
        totals.stop_turns += int(fast.stop_turns[exact].sum())
        totals.stop_ended_turns += int(fast.turns[exact].sum())  # every turn of an exact row ends with a stop
        totals.stop_long_episodes += int((fast.turns[exact] >= LONG).sum())
    return totals


def mismatch(t: ReplayTotals, ctx: ReplayContext) -> str | None:
    """Why the log does not read as this model's tokenizer, or None. Derived from the tokenizer and template:
    ids outside the vocabulary in every record read; or no episode opening with a control token the template
    opens conversations with, and no sampled turn ending with one of its stop tokens."""
    model = ctx.model or "the model"
    if t.out_of_vocabulary and t.episodes == 0:
        return (
            f"every record read holds ids outside {model}'s tokenizer ({ctx.vocab_size} ids): the log was written "
            "with another tokenizer (--model names the model whose tokenizer and template the loop used)"
        )
    if ctx.marks and t.episodes and t.turns and t.mark_episodes == 0 and t.stop_turns == 0:
        names = ", ".join(repr(ctx.decode([i])) for i in sorted(ctx.marks)[:4])
        stops = ", ".join(repr(ctx.decode([i])) for i in ctx.stop_ids[:3])
        return (
            f"the log does not read as {model}'s tokenizer: none of {t.episodes} episode(s) opens with a control "
            f"token of its template ({names}) and none of {t.turns} sampled turns ends with its stop tokens ({stops}); "
            "was it written with another model's tokenizer? (--model names the model the loop used)"
        )
    return None


class ReplayInterrupted(Exception):
    """Ctrl-C during a replay: ``totals`` holds the parts of the log replayed before it, in log order (a prefix of
    the log: nothing after a part that did not finish is counted); ``mismatch`` says why those parts do not read as
    the model's tokenizer (then they are no report), else None."""

    def __init__(self, totals: ReplayTotals, mismatch: str | None) -> None:
        super().__init__(f"interrupted after {totals.records} records")
        self.totals, self.mismatch = totals, mismatch


def stop(totals: ReplayTotals, fit: _Fit) -> ReplayInterrupted:
    """What a Ctrl-C keeps: the totals so far, once they are held to the tokenizer as a whole log is."""
    try:
        fit(totals, final=True)
    except TokenizerMismatch as exc:
        return ReplayInterrupted(totals, str(exc))
    return ReplayInterrupted(totals, None)


class _Fit:
    """Checks the fit once ``FIT_SAMPLE`` episodes were read, and at the end."""

    def __init__(self, ctx: ReplayContext) -> None:
        self.ctx, self.done = ctx, False

    def __call__(self, totals: ReplayTotals, final: bool = False) -> None:
        if self.done or (not final and totals.episodes + totals.out_of_vocabulary < FIT_SAMPLE):
            return
        self.done = True
        why = mismatch(totals, self.ctx)
        if why is not None:
            raise TokenizerMismatch(why)


def _init(ctx: ReplayContext, fmt: str, field_map: FieldMap | None, max_record_bytes: int) -> None:
    _WORKER.update(ctx=ctx, fmt=fmt, map=field_map, max=max_record_bytes)


def _lines_task(items: list[tuple[int, Any]], file: str) -> ReplayTotals:
    return replay_lines(items, _WORKER["ctx"], _WORKER["fmt"], _WORKER["map"], file)


def _row_group_task(path: str, group: int, first_line: int, file: str) -> ReplayTotals:
    pf = open_parquet(Path(path))
    totals = ReplayTotals()
    line = first_line
    batches = pf.iter_batches(batch_size=PARQUET_BATCH, row_groups=[group], use_threads=False)
    while True:
        try:
            batch = next(batches, None)
        except Exception as exc:  # a corrupt row group (pyarrow's errors): what was read is kept, the rest reported
            totals.add_malformed(line, f"Parquet data unreadable from here on ({exc}); nothing after it", file)
            return totals
        if batch is None:
            return totals
        totals.merge(replay_batch(batch, line, _WORKER["ctx"], _WORKER["fmt"], _WORKER["map"], file, _WORKER["max"]))
        line += batch.num_rows


def _unreadable_task(message: str, file: str) -> ReplayTotals:
    totals = ReplayTotals()
    totals.add_malformed(1, message, file)
    return totals


# A log of several that holds no record (a writer that crashed before its first, a shard left empty) is one
# malformed record of its own: replayed alone it is refused (exit 2), and among others it was passed over in
# silence, the run's answer then covering episodes it never held.
EMPTY_LOG = "the log holds no record"


def labels(paths: Sequence[Path]) -> dict[Path, str]:
    """How findings name each file: nothing for a single log, else its name (its path where names repeat)."""
    if len(paths) <= 1:
        return dict.fromkeys(paths, "")
    names = [p.name for p in paths]
    return {p: (p.name if names.count(p.name) == 1 else str(p)) for p in paths}


def _parts(path: Path, file: str, ctx: ReplayContext, fmt: str, fmap: FieldMap | None, bound: int) -> Iterator[Any]:
    """In-process parts of one log, as ReplayTotals."""
    if log_kind(path) == "parquet":
        for first, batch, _sizes in parquet_batches(path, bound):
            if isinstance(batch, RecordError):
                yield totals_of([Malformed(first, str(batch), file)])
                return
            yield replay_batch(batch, first, ctx, fmt, fmap, file, bound)
        return
    chunk: list[tuple[int, Any]] = []
    for item in iter_lines(path, bound):
        chunk.append(item)
        if len(chunk) >= CHUNK:
            yield replay_lines(chunk, ctx, fmt, fmap, file)
            chunk = []
    if chunk:
        yield replay_lines(chunk, ctx, fmt, fmap, file)


def _tasks(
    path: Path, file: str, bound: int, several: bool
) -> Iterator[tuple[Callable[..., ReplayTotals], tuple[Any, ...], int]]:
    """Worker tasks of one log: (function, arguments, records it covers); ``several``: the log is one of several,
    and holding no record makes it a malformed one (``EMPTY_LOG``)."""
    records = 0
    for task in _log_tasks(path, file, bound):
        records += task[2]
        yield task
    if not records and several:
        yield _unreadable_task, (EMPTY_LOG, file), 1


def _log_tasks(path: Path, file: str, bound: int) -> Iterator[tuple[Callable[..., ReplayTotals], tuple[Any, ...], int]]:
    if log_kind(path) == "parquet":
        try:
            pf = open_parquet(path)
        except UnreadableParquet as exc:  # one malformed record of its file: the other logs are replayed
            yield _unreadable_task, (str(exc.record), file), 1
            return
        first = 1
        for g in range(pf.num_row_groups):
            rows = pf.metadata.row_group(g).num_rows
            yield _row_group_task, (str(path), g, first, file), rows
            first += rows
        return
    chunk: list[tuple[int, Any]] = []
    for item in iter_lines(path, bound):
        chunk.append(item)
        if len(chunk) >= CHUNK:
            yield _lines_task, (chunk, file), len(chunk)
            chunk = []
    if chunk:
        yield _lines_task, (chunk, file), len(chunk)


def replay_log(
    path: Path | str | Sequence[Path | str],
    ctx: ReplayContext,
    *,
    fmt: str = "auto",
    field_map: FieldMap | None = None,
    workers: int = 1,
    on_records: Callable[[int], None] | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
) -> ReplayTotals:
    """Totals over one log, or several (paths or glob patterns, in order). ``workers <= 1`` runs here;
    ``LogError`` if a log cannot be opened, ``TokenizerMismatch`` if it was written with another tokenizer."""
    paths = expand([path] if isinstance(path, (str, Path)) else list(path))
    names = labels(paths)
    totals = ReplayTotals()
    fit = _Fit(ctx)

    def take(part: ReplayTotals, n_records: int) -> None:
        interrupt.check()  # a Ctrl-C swallowed in a destructor stops the replay before this part is counted
        totals.merge(part)
        fit(totals)
        if on_records is not None:
            on_records(n_records)

    try:
        if workers <= 1:
            for p in paths:
                records = 0
                for part in _parts(p, names[p], ctx, fmt, field_map, max_record_bytes):
                    records += part.records
                    take(part, part.records)
                if not records and len(paths) > 1:
                    take(_unreadable_task(EMPTY_LOG, names[p]), 1)
        else:
            _in_workers(paths, names, (ctx, fmt, field_map, max_record_bytes), workers, take)
    except KeyboardInterrupt:
        raise stop(totals, fit) from None
    fit(totals, final=True)
    return totals


def _in_workers(
    paths: Sequence[Path],
    names: dict[Path, str],
    init: tuple[Any, ...],
    workers: int,
    take: Callable[[ReplayTotals, int], None],
) -> None:
    """The logs' parts in worker processes, taken in log order; at most ``2 * workers`` ahead of the next."""
    max_record_bytes = init[3]
    ahead = 2 * workers  # parts in flight or finished ahead of the one taken next: memory stays constant
    sizes: dict[int, int] = {}
    finished: dict[int, ReplayTotals] = {}
    taken = 0

    def take_ready(limit: int) -> None:
        """Wait until at most ``limit`` parts are ahead of the next one to take, taking them in log order."""
        nonlocal taken
        while len(sizes) > limit:
            while taken in finished:
                take(finished.pop(taken), sizes.pop(taken))
                taken += 1
            if len(sizes) <= limit:
                return
            event = pool.next()
            if isinstance(event, Raised):
                reraise(event)
            if isinstance(event, Died | Killed):
                raise RuntimeError(f"a replay worker process died (exit code {getattr(event, 'exitcode', None)})")
            if isinstance(event, Done):
                finished[event.key] = event.value

    with WorkerPool(workers, _init, init) as pool:
        key = 0
        for p in paths:
            for fn, args, n in _tasks(p, names[p], max_record_bytes, len(paths) > 1):
                pool.submit(key, fn, *args)
                sizes[key] = n
                key += 1
                take_ready(ahead - 1)
        take_ready(0)
