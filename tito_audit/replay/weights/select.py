"""Which episodes of a log the weights are run on: all of them, or a deterministic sample of ``--max-episodes``.

Running a model costs far more per episode than the TITO check, so a large log is sampled. The episodes the
replay found diverged (``diverged``, replay's own per-episode verdict) come first: they are what the weights are
run to measure, and a sample blind to them can pass on clean episodes alone. Within each group (diverged, then
the rest) the sample is the episodes whose key, a hash of (file position, line, episode within the record), is
smallest: a sample without replacement that is the same on every run and on every machine, whatever the order
workers finish in, and that needs one pass over the log holding only ``n`` records (a record is parsed and
checked only while it could still enter the sample). The episodes come back in log order.

Each episode carries the record's own ``sampling`` object when it has one (the sampler the engine used), read
from the record as written, before ``--map``.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tito_audit.replay.adapters import to_episodes
from tito_audit.replay.context import ReplayContext
from tito_audit.replay.mapping import FieldMap
from tito_audit.replay.reader import MAX_RECORD_BYTES, expand, iter_records, parse_line
from tito_audit.replay.run import labels
from tito_audit.replay.schema import Episode, RecordError

SALT = b"tito-audit replay --max-episodes"


@dataclass
class Selected:
    episode: Episode
    sampling: Any  # the record's ``sampling`` object, or None
    diverged: bool = False  # replay's verdict, when the sample asked for it


def sample_key(file_index: int, line: int, k: int = 0) -> int:
    h = hashlib.blake2b(f"{file_index}:{line}:{k}".encode(), digest_size=8, key=SALT)
    return int.from_bytes(h.digest(), "big")


def _episodes(record: Any, line: int, file: str, ctx: ReplayContext, fmt: str, fmap: FieldMap | None) -> list[Selected]:
    """The replayable episodes of one record (none when the replay itself counts it as malformed)."""
    if isinstance(record, bytes):
        record = parse_line(record)
    if isinstance(record, RecordError):
        return []
    sampling = record.get("sampling") if isinstance(record, Mapping) else None
    try:
        episodes = to_episodes(fmap.apply(record) if fmap else record, line, fmt)
        for ep in episodes:
            ep.file = file
            ctx.check_ids(ep)
    except RecordError:
        return []
    return [Selected(ep, sampling) for ep in episodes]


def select_episodes(
    logs: Sequence[str | Path],
    ctx: ReplayContext,
    *,
    fmt: str = "auto",
    field_map: FieldMap | None = None,
    max_episodes: int = 0,
    max_record_bytes: int = MAX_RECORD_BYTES,
    diverged: Callable[[Episode], bool] | None = None,
) -> Iterator[Selected]:
    """Every replayable episode (``max_episodes`` 0), streamed; else the deterministic sample, in log order: the
    episodes ``diverged`` says diverged first, then the others (both by hash)."""
    paths = expand(list(logs))
    names = labels(paths)
    if max_episodes <= 0:
        for p in paths:
            for line, record in iter_records(p, raw=True, max_record_bytes=max_record_bytes):
                yield from _episodes(record, line, names[p], ctx, fmt, field_map)
        return
    # A max-heap (negated ranks) of the n smallest record ranks (0 when an episode of it diverged, else 1; then the
    # hash); each record's episodes are ranked again below.
    heap: list[tuple[tuple[int, int], int, int, list[Selected]]] = []
    for fi, p in enumerate(paths):
        for line, record in iter_records(p, raw=True, max_record_bytes=max_record_bytes):
            key = sample_key(fi, line)
            if len(heap) >= max_episodes and (0 if diverged else 1, key) >= _rank(heap[0][0]):
                continue  # not even as a diverged record would it enter the sample
            found = _episodes(record, line, names[p], ctx, fmt, field_map)
            if not found:
                continue
            if diverged is not None:
                for s in found:
                    s.diverged = diverged(s.episode)
            rank = (0 if any(s.diverged for s in found) else 1, key)
            if len(heap) >= max_episodes and rank >= _rank(heap[0][0]):
                continue
            entry = ((-rank[0], -rank[1]), fi, line, found)
            if len(heap) < max_episodes:
                heapq.heappush(heap, entry)
            else:
                heapq.heapreplace(heap, entry)
    keyed = [
        ((0 if s.diverged else 1, sample_key(fi, line, k)), fi, line, k, s)
        for _, fi, line, found in heap
        for k, s in enumerate(found)
    ]
    chosen = sorted(keyed, key=lambda e: e[0])[:max_episodes]
    for *_, s in sorted(chosen, key=lambda e: (e[1], e[2], e[3])):
        yield s


def _rank(negated: tuple[int, int]) -> tuple[int, int]:
    return -negated[0], -negated[1]
