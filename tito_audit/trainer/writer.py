"""Write native replay records from any training loop: JSONL, gzip-compressed JSONL or Parquet.

    with LogWriter("rollouts.jsonl.gz", max_bytes=256 << 20) as log:
        log.write_episode(sampled=turn_ids, logprobs=turn_logprobs, prompt_ids=turn_prompt_ids,
                          input_ids=trained_ids, loss_mask=mask, messages=messages, tools=tools,
                          chat_template_kwargs={"enable_thinking": False}, id="step3-ep7")
        log.flush()  # e.g. once per step: what is flushed survives a crash

One record per episode, in the schema ``tito-audit replay`` reads (``tito_audit.replay.schema``); each record is
validated when it is written, so a loop that logs the wrong thing hears it at once, not at replay time. This module
buffers, rotates and locks; what differs between the three containers is one class each in ``containers``.

Why the log stays readable after a crash: records are buffered whole and every flush reaches the file in one
``write`` (JSONL: complete lines; gzip: one complete gzip member), so a process that dies anywhere outside that
system call (an exception, ``os._exit``, SIGKILL while the loop computes) leaves only whole records. Parquet parts
are written under a temporary name and renamed when complete, so a Parquet part is either whole or absent. A
kill inside the ``write`` call itself, a full disk or a power cut can still cut the last JSONL chunk short: the
reader then reads every whole record and counts the cut one, and the next ``LogWriter`` opened on that file cuts
the partial tail off before it appends (``repaired_bytes``).

``max_bytes`` rotates the log into numbered parts (``rollouts-00000.jsonl.gz``, ``-00001``, ...), each one a
complete log that ``replay`` reads on its own. Parquet is always written in parts: ``flush`` seals the current
part (a Parquet file is readable only once its footer is written). Opening an existing log appends: JSONL goes on
in the same file (or the last part), Parquet starts a new part. One writer writes a log at a time: a second one
(another process, or another ``LogWriter`` in this one) gets ``RuntimeError`` when it flushes, from an exclusive
lock (JSONL: on the file; Parquet: on a ``.NAME.lock`` file beside the parts), and a Parquet part is never
replaced, lock or not (a sealed part takes a name no file has). Threads share one writer safely. Several ranks
of one job each take their own name: ``per_rank_path``.

A writer that is never closed still loses nothing it was given: what it holds is written when the interpreter
exits, or when the writer is garbage-collected (then a ``RuntimeWarning``, once, names the log and the records
that were pending). Only a process killed before either (SIGKILL, ``os._exit``) loses what was not flushed.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
import warnings
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from tito_audit.replay.schema import NATIVE_FIELDS, Episode, RecordError, episode_from_native, episode_to_native
from tito_audit.trainer.batch_item import ALIASES, MASK_FIELDS, BatchItemError, native_record
from tito_audit.trainer.containers import (
    FORMATS,
    JSON_FIELDS,
    LogFormat,
    Part,
    container,
    format_of,
    lock_exclusive,
    split_name,
)

__all__ = ["FORMATS", "JSON_FIELDS", "LogFormat", "LogWriter", "format_of", "per_rank_path"]

_KNOWN_FIELDS = frozenset((*NATIVE_FIELDS, "metadata", *ALIASES, *MASK_FIELDS))


def per_rank_path(path: str | os.PathLike[str], rank: int | None = None, world_size: int | None = None) -> Path:
    """The log name for this rank of a distributed job: ``rollouts.jsonl.gz`` becomes ``rollouts.rank3.jsonl.gz``
    when there are several ranks (unchanged with one). Rank and world size default to ``torch.distributed``'s
    when it is initialised, else to the ``RANK``/``WORLD_SIZE`` variables launchers (torchrun, accelerate) set."""
    path = Path(path)
    if rank is None or world_size is None:
        found_rank, found_world = _distributed()
        rank = found_rank if rank is None else rank
        world_size = found_world if world_size is None else world_size
    if world_size <= 1:
        return path
    stem, ext = split_name(path, format_of(path))
    return path.with_name(f"{stem}.rank{rank}{ext}")


def _distributed() -> tuple[int, int]:
    """(rank, world size) of this process: torch.distributed when initialised, else RANK/WORLD_SIZE, else (0, 1)."""
    import sys

    dist = getattr(sys.modules.get("torch"), "distributed", None)  # only if the loop already imported torch
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    except ValueError:
        return 0, 1


class LogWriter:
    """Append one native replay record per episode to a JSONL, gzip JSONL or Parquet log; see the module doc."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: LogFormat | None = None,
        max_bytes: int | None = None,
        buffer_bytes: int = 1 << 20,
        fsync: bool = False,
    ) -> None:
        self.path = Path(path)
        self.format: LogFormat = format or format_of(self.path)
        self._container = container(self.format)
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError("max_bytes must be positive (or None: no rotation)")
        self._container.check_available(self.path)
        self.max_bytes = max_bytes
        # a chunk never exceeds a part, so parts stay within max_bytes (unless one record alone is larger)
        self.buffer_bytes = max(1, min(buffer_bytes, max_bytes) if max_bytes else buffer_bytes)
        self.fsync = fsync
        self.parts = self._container.parts or max_bytes is not None
        self.stem, self.ext = split_name(self.path, self.format)
        self.records = 0  # records written by this writer (flushed or buffered)
        self.repaired_bytes = 0  # bytes of a partial last record cut off when an existing log was reopened
        self._lock = threading.Lock()
        self._pending: list[Any] = []  # records as the container encodes them (JSONL: lines; Parquet: row dicts)
        self._pending_bytes = 0
        self._sink: Part | None = None
        self._written: list[Path] = []
        self._closed = False
        self._lock_fd: int | None = None  # Parquet: the log's lock file, held from the first flush to close
        self._pid = os.getpid()  # a forked child does not write its parent's pending records a second time
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._index = self._last_index()
        _OPEN.add(self)

    # -- files ------------------------------------------------------------------------------------------------

    def _part(self, index: int) -> Path:
        return self.path.with_name(f"{self.stem}-{index:05d}{self.ext}") if self.parts else self.path

    def _last_index(self) -> int:
        """The part to go on in (JSONL) or the last one taken (Parquet: a new part always follows)."""
        if not self.parts:
            return 0
        pattern = re.compile(rf"\.?{re.escape(self.stem)}-(\d{{5,}}){re.escape(self.ext)}(\.partial)?")
        found = [int(m.group(1)) for p in self.path.parent.iterdir() if (m := pattern.fullmatch(p.name))]
        return max(found, default=self._container.first_part)

    def _open(self) -> Part:
        """The part records go to now: JSONL goes on in the current part (its own lock on the file); a sealed
        part is never reopened, so each new one takes the next free name (under the log's lock file)."""
        if not self._container.seal_on_flush:
            sink = self._container.open(self._part(self._index), self.fsync, self._free_part)
            self.repaired_bytes += sink.repaired
            if sink.path not in self._written:
                self._written.append(sink.path)
            return sink
        if self._lock_fd is None:
            lock = self.path.with_name(f".{self.stem}{self.ext}.lock")
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                lock_exclusive(fd, self.path)
            except BaseException:
                os.close(fd)
                raise
            self._lock_fd = fd
            self._index = max(self._index, self._last_index())  # parts sealed before the lock was ours
        return self._container.open(self._free_part(), self.fsync, self._free_part)

    def _free_part(self) -> Path:
        """The next Parquet part name that no file holds, sealed or partial (a crashed writer's, another's)."""
        while True:
            self._index += 1
            path = self._part(self._index)
            if not path.exists() and not path.with_name(f".{path.name}.partial").exists():
                return path

    def _seal(self) -> None:
        """Close the current part; the next write opens the next one."""
        if self._sink is not None:
            sink, self._sink = self._sink, None
            sink.close()
            if self._container.seal_on_flush:
                self._written.append(sink.path)  # its name once sealed (another if its own was taken)
            elif self.parts:
                self._index += 1

    @property
    def paths(self) -> list[Path]:
        """The files this writer has written to, in order (Parquet: sealed parts only)."""
        with self._lock:
            return [p for p in self._written if p.exists()]

    # -- records ----------------------------------------------------------------------------------------------

    def write(self, record: Mapping[str, Any] | Episode) -> None:
        """Append one episode: a native record (``record_from_trajectory``'s output, say) or an ``Episode``.

        Raises ``RecordError`` naming the episode (its number in this writer, and its id) and the field, for a
        record replay could not read or whose lengths disagree (a loss mask or log-probs that do not match the ids
        they describe); nothing is written then.
        """
        try:
            ep, metadata = self._episode(record)
        except RecordError as exc:
            raise RecordError(f"{self._which(record)}: {exc}") from None
        row = episode_to_native(ep)
        if metadata is not None:
            row["metadata"] = metadata
        item, size = self._container.encode(row)
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: write to a closed LogWriter")
            self._pending.append(item)
            self._pending_bytes += size
            self.records += 1
            if self._pending_bytes >= self.buffer_bytes:
                self._drain(seal=False)

    def _episode(self, record: Mapping[str, Any] | Episode) -> tuple[Episode, Any]:
        """The episode a record holds and its metadata, checked as replay will read it."""
        if isinstance(record, Episode):
            ep, metadata = record, None
        else:
            unknown = sorted(k for k in record if k not in _KNOWN_FIELDS)
            if unknown:
                raise RecordError(
                    f"unknown field(s) {', '.join(map(repr, unknown))}: a record holds {', '.join(NATIVE_FIELDS)} "
                    f"(or the batch names {', '.join(ALIASES)}); put anything else under metadata"
                )
            try:
                record = native_record(record)
            except BatchItemError as exc:
                raise RecordError(str(exc)) from None
            ep, metadata = episode_from_native(record), record.get("metadata")
        if ep.loss_mask is not None and len(ep.loss_mask) != len(ep.input_ids):
            raise RecordError(f"loss_mask has {len(ep.loss_mask)} values for {len(ep.input_ids)} input_ids")
        for k, turn in enumerate(ep.turns):
            if turn.logprobs is not None and len(turn.logprobs) != len(turn.ids):
                raise RecordError(f"turns[{k}].logprobs has {len(turn.logprobs)} values for {len(turn.ids)} ids")
        return ep, metadata

    def _which(self, record: Mapping[str, Any] | Episode) -> str:
        """The episode in words: its number among this writer's records, its id when it has one, the log."""
        given = record.id if isinstance(record, Episode) else record.get("id") if isinstance(record, Mapping) else None
        named = f" (id {given!r})" if given not in (None, "") else ""
        return f"{self.path}: episode {self.records + 1}{named}"

    def write_episode(
        self,
        *,
        sampled: Sequence[Sequence[int]],
        input_ids: Sequence[int],
        loss_mask: Sequence[int] | None = None,
        logprobs: Sequence[Sequence[float] | None] | None = None,
        prompt_ids: Sequence[Sequence[int] | None] | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one episode from what a loop holds: per assistant turn the sampled ids (and, if kept, their
        log-probs and the prompt ids the engine was given), the trained ids and loss mask, and the chat as the
        rollout code kept it. Lists, tuples, numpy arrays and tensors are all accepted."""
        which = self._which({"id": id})
        if isinstance(sampled, (str, bytes)) or (not isinstance(sampled, Sequence) and not hasattr(sampled, "tolist")):
            raise TypeError(f"{which}: sampled must be a list of per-turn id lists")
        per_turn = [sampled[k] for k in range(len(sampled))]
        for name, values in (("logprobs", logprobs), ("prompt_ids", prompt_ids)):
            if values is not None and len(values) != len(per_turn):
                raise ValueError(f"{which}: {name} has {len(values)} entries for {len(per_turn)} sampled turns")
        turns = []
        for k, ids in enumerate(per_turn):
            turn: dict[str, Any] = {"ids": ids}
            if logprobs is not None and logprobs[k] is not None:
                turn["logprobs"] = logprobs[k]
            if prompt_ids is not None and prompt_ids[k] is not None:
                turn["prompt_ids"] = prompt_ids[k]
            turns.append(turn)
        record: dict[str, Any] = {"turns": turns, "input_ids": input_ids}
        optional = {
            "loss_mask": loss_mask,
            "messages": messages,
            "tools": tools,
            "chat_template_kwargs": chat_template_kwargs,
            "id": id,
            "metadata": metadata,
        }
        record.update({k: v for k, v in optional.items() if v is not None})
        self.write(record)

    def _drain(self, seal: bool) -> None:
        """Write what is pending (lock held): one chunk into the current part, rotating first if it would not fit."""
        if self._pending:
            if self._sink is None:
                self._sink = self._open()
            if self.max_bytes is not None:
                size = self._sink.size()
                if size and size + self._pending_bytes > self.max_bytes:
                    self._seal()
                    self._sink = self._open()
            self._sink.write(self._pending)
            self._pending, self._pending_bytes = [], 0
            if self.max_bytes is not None and self._sink.size() >= self.max_bytes:
                self._seal()
        if seal and self._container.seal_on_flush:
            self._seal()

    def flush(self) -> None:
        """Write every pending record (Parquet: and seal the part, so that it can be read)."""
        with self._lock:
            if not self._closed:
                self._drain(seal=True)

    def close(self) -> None:
        """Flush and close; further writes raise. Closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            try:
                self._drain(seal=True)
            finally:
                try:
                    self._seal()
                finally:
                    self._closed = True
                    if self._lock_fd is not None:
                        os.close(self._lock_fd)  # the lock file stays: removing it could let two writers lock two
                        self._lock_fd = None
                    _OPEN.discard(self)

    def _close_unclosed(self, collected: bool) -> None:
        """Write what an unclosed writer holds (at interpreter exit, or when it is garbage-collected)."""
        if getattr(self, "_closed", True) or self._pid != os.getpid():
            return
        pending = len(self._pending)
        try:
            self.close()
        except Exception as exc:  # said, not raised: a collector or atexit has no caller to raise to
            message = f"{self!r}: {pending} pending record(s) could not be written: {exc}"
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            return
        global _WARNED
        if collected and pending and not _WARNED:
            _WARNED = True
            warnings.warn(
                f"{self!r} was garbage-collected without close(): its {pending} pending record(s) were written "
                "then; call close() (or use `with LogWriter(...)`) so that they are written when you expect",
                RuntimeWarning,
                stacklevel=2,
            )

    def __del__(self) -> None:
        self._close_unclosed(collected=True)

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LogWriter({str(self.path)!r}, format={self.format!r}, records={self.records})"


_OPEN: weakref.WeakSet[LogWriter] = weakref.WeakSet()  # writers not closed yet, closed at interpreter exit
_WARNED = False


@atexit.register
def _close_at_exit() -> None:
    """Write what every unclosed writer holds, as Python's own files do at exit."""
    for writer in list(_OPEN):
        writer._close_unclosed(collected=False)  # one log's failure is said and does not cost the others theirs
