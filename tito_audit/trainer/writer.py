"""Write native replay records from any training loop: JSONL, gzip-compressed JSONL or Parquet.

    with LogWriter("rollouts.jsonl.gz", max_bytes=256 << 20) as log:
        log.write_episode(sampled=turn_ids, logprobs=turn_logprobs, prompt_ids=turn_prompt_ids,
                          input_ids=trained_ids, loss_mask=mask, messages=messages, tools=tools,
                          chat_template_kwargs={"enable_thinking": False}, id="step3-ep7")
        log.flush()  # e.g. once per step: what is flushed survives a crash

One record per episode, in the schema ``tito-audit replay`` reads (``tito_audit.replay.schema``); each record is
validated when it is written, so a loop that logs the wrong thing hears it at once, not at replay time.

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
import gzip
import json
import os
import re
import threading
import warnings
import weakref
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from tito_audit.replay.reader import GZIP_MAGIC, PARQUET_MAGIC
from tito_audit.replay.schema import NATIVE_FIELDS, Episode, RecordError, episode_from_native, episode_to_native
from tito_audit.trainer.batch_item import ALIASES, MASK_FIELDS, BatchItemError, native_record

LogFormat = Literal["jsonl", "jsonl.gz", "parquet"]
FORMATS: tuple[LogFormat, ...] = ("jsonl", "jsonl.gz", "parquet")
JSON_FIELDS = ("messages", "tools", "chat_template_kwargs", "metadata")  # JSON text in Parquet (free-form objects)
_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonlines")
_KNOWN_FIELDS = frozenset((*NATIVE_FIELDS, "metadata", *ALIASES, *MASK_FIELDS))

try:
    import fcntl
except ImportError:  # not POSIX: no cross-process lock, one writer per file is then the caller's promise
    fcntl = None  # type: ignore[assignment]


def format_of(path: Path) -> LogFormat:
    """The format a log name asks for: ``.parquet``, ``.gz`` (gzip JSONL), else ``.jsonl``/``.json``/``.ndjson``."""
    name = path.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".gz"):
        return "jsonl.gz"
    if name.endswith(_JSONL_SUFFIXES):
        return "jsonl"
    raise ValueError(f"{path}: cannot tell the log format from the name (.jsonl, .jsonl.gz or .parquet); pass format=")


def _split_name(path: Path, fmt: LogFormat) -> tuple[str, str]:
    """(stem, extension) with the whole format extension, e.g. ``rollouts`` + ``.jsonl.gz``."""
    name = path.name
    ext = {"parquet": ".parquet", "jsonl.gz": ".gz", "jsonl": ""}[fmt]
    if fmt != "parquet":
        inner = name[: len(name) - len(ext)] if ext else name
        suffix = next((s for s in _JSONL_SUFFIXES if inner.lower().endswith(s)), "")
        ext = suffix + ext
    return name[: len(name) - len(ext)] if ext else name, ext


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
    stem, ext = _split_name(path, format_of(path))
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


def _plain(value: Any) -> Any:
    """``json.dumps`` fallback: tensors and numpy values as lists and numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _last_newline(fd: int, size: int) -> int:
    """Length of the file up to and including its last newline (0 if it has none)."""
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def _jsonl_end(fd: int, size: int, path: Path) -> tuple[int, bytes]:
    """(length to keep, bytes to add) before appending to an existing JSONL file.

    A last line without its newline is a record cut short by a crash (cut off), or a whole record from a writer
    that does not end its lines (kept, and its newline added)."""
    head = os.pread(fd, 4, 0)
    if head.startswith((GZIP_MAGIC, PARQUET_MAGIC)):
        raise ValueError(f"{path}: holds gzip or Parquet data, not JSONL text; not appending to it")
    keep = _last_newline(fd, size)
    if keep == size:
        return size, b""
    try:
        json.loads(os.pread(fd, size - keep, keep))
    except ValueError:
        return keep, b""
    return size, b"\n"


def _gzip_end(fd: int, size: int, path: Path) -> tuple[int, bytes]:
    """(length to keep, bytes to add) before appending to an existing gzip JSONL file.

    A last gzip member cut short by a crash is cut off; a stream that is corrupt rather than short is refused (it
    is not what a crash leaves, and cutting it could drop records)."""
    if os.pread(fd, 2, 0) != GZIP_MAGIC:
        raise ValueError(f"{path}: not gzip data; not appending to it")
    good = offset = 0
    inflater = zlib.decompressobj(31)
    member_last, complete_last = b"", b"\n"  # the last byte of this member's text, of the last whole member's
    while offset < size:
        data = os.pread(fd, min(1 << 20, size - offset), offset)
        base = offset
        offset += len(data)
        while data:
            try:
                out = inflater.decompress(data)
            except zlib.error as exc:
                raise ValueError(f"{path}: corrupt gzip data after byte {good} ({exc}); not appending to it") from None
            member_last = out[-1:] or member_last
            if not inflater.eof:
                break
            complete_last, member_last = member_last or complete_last, b""
            rest = inflater.unused_data
            good = base + len(data) - len(rest)
            base, data = good, rest
            inflater = zlib.decompressobj(31)
    return good, (b"" if complete_last == b"\n" else gzip.compress(b"\n", mtime=0))


def _lock_exclusive(fd: int, path: Path) -> None:
    """An exclusive ``flock`` on ``fd`` (held until it is closed), or ``RuntimeError``: one writer per log. The lock
    belongs to the open file, so a second ``LogWriter`` in the same process is refused like another process."""
    if fcntl is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RuntimeError(
            f"{path}: another writer (process or LogWriter) is writing this log; one writer per log: give each "
            "rank or process its own name (tito_audit.replay.per_rank_path)"
        ) from None


class _JsonLines:
    """One JSONL (or gzip JSONL) part, appended through an ``O_APPEND`` descriptor, one ``write`` per chunk."""

    def __init__(self, path: Path, gz: bool, fsync: bool) -> None:
        self.path, self.gz, self.fsync = path, gz, fsync
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _lock_exclusive(self.fd, path)
            size = os.fstat(self.fd).st_size
            keep, close_line = (_gzip_end if gz else _jsonl_end)(self.fd, size, path) if size else (0, b"")
            if keep < size:
                os.ftruncate(self.fd, keep)
            if close_line:
                _write_all(self.fd, close_line)
            self.repaired = size - keep
        except BaseException:
            os.close(self.fd)
            raise

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def write(self, lines: list[bytes]) -> None:
        data = b"".join(lines)
        _write_all(self.fd, gzip.compress(data, compresslevel=6, mtime=0) if self.gz else data)
        if self.fsync:
            os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)


class _ParquetPart:
    """One Parquet part, written as ``.NAME.partial`` and given its name NAME when sealed (footer written). It never
    replaces a file: the part number is claimed with ``O_EXCL`` only where no part of that number exists, and the
    sealed part is hard-linked to its name (which fails where a file is), so that even two writers without a lock
    between them (not POSIX, a file system without ``flock``) cannot replace each other's parts."""

    def __init__(self, path: Path, fsync: bool, free: Callable[[], Path]) -> None:
        import pyarrow.parquet as pq

        self.path, self.fsync, self.free = path, fsync, free
        self.partial = path.with_name(f".{path.name}.partial")
        if path.exists():
            raise FileExistsError(path)
        fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # claims the part number
        os.close(fd)
        self.writer = pq.ParquetWriter(self.partial, _arrow_schema(), compression="zstd")
        self.repaired = 0

    def size(self) -> int:
        return self.partial.stat().st_size

    def write(self, records: list[dict[str, Any]]) -> None:
        import pyarrow as pa

        self.writer.write_table(pa.Table.from_pylist(records, schema=_arrow_schema()))

    def close(self) -> None:
        self.writer.close()
        if self.fsync:
            fd = os.open(self.partial, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        while True:
            try:
                os.link(self.partial, self.path)  # fails where a file is: nothing is ever replaced
                break
            except FileExistsError:
                self.path = self.free()  # another writer sealed this number meanwhile: the next free one
            except OSError:  # no hard links here: rename, after a check (a narrow race, only without a lock)
                if self.path.exists():
                    self.path = self.free()
                    continue
                os.rename(self.partial, self.path)
                return
        os.unlink(self.partial)


_SCHEMA: Any = None


def _arrow_schema() -> Any:
    """Token columns as Arrow lists (what replay streams), free-form objects as JSON text."""
    global _SCHEMA
    if _SCHEMA is None:
        import pyarrow as pa

        ids = pa.list_(pa.int32())
        turn = pa.struct([("ids", ids), ("logprobs", pa.list_(pa.float64())), ("prompt_ids", ids)])
        _SCHEMA = pa.schema(
            [
                ("id", pa.string()),
                ("turns", pa.list_(turn)),
                ("input_ids", ids),
                ("loss_mask", pa.list_(pa.int8())),
                *[(name, pa.string()) for name in JSON_FIELDS],
            ]
        )
    return _SCHEMA


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
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {self.format!r}")
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError("max_bytes must be positive (or None: no rotation)")
        if self.format == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ImportError(
                    f"{self.path}: a Parquet log needs pyarrow (pip install 'tito-audit[parquet]'); or write .jsonl.gz"
                ) from None
        self.max_bytes = max_bytes
        # a chunk never exceeds a part, so parts stay within max_bytes (unless one record alone is larger)
        self.buffer_bytes = max(1, min(buffer_bytes, max_bytes) if max_bytes else buffer_bytes)
        self.fsync = fsync
        self.parts = self.format == "parquet" or max_bytes is not None
        self.stem, self.ext = _split_name(self.path, self.format)
        self.records = 0  # records written by this writer (flushed or buffered)
        self.repaired_bytes = 0  # bytes of a partial last record cut off when an existing log was reopened
        self._lock = threading.Lock()
        self._pending: list[Any] = []  # JSONL: encoded lines; Parquet: row dicts
        self._pending_bytes = 0
        self._sink: _JsonLines | _ParquetPart | None = None
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
        if self.format == "parquet":
            return max(found, default=-1)
        return max(found, default=0)

    def _open(self) -> _JsonLines | _ParquetPart:
        if self.format == "parquet":
            if self._lock_fd is None:
                lock = self.path.with_name(f".{self.stem}{self.ext}.lock")
                fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    _lock_exclusive(fd, self.path)
                except BaseException:
                    os.close(fd)
                    raise
                self._lock_fd = fd
                self._index = max(self._index, self._last_index())  # parts sealed before the lock was ours
            return _ParquetPart(self._free_part(), self.fsync, self._free_part)
        sink = _JsonLines(self._part(self._index), self.format == "jsonl.gz", self.fsync)
        self.repaired_bytes += sink.repaired
        if sink.path not in self._written:
            self._written.append(sink.path)
        return sink

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
            if self.format == "parquet":
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

        Raises ``RecordError`` (naming the field) for a record replay could not read; nothing is written then.
        """
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
        row = episode_to_native(ep)
        if metadata is not None:
            row["metadata"] = metadata
        if self.format == "parquet":
            item: Any = self._parquet_row(row)
            size = 4 * (len(ep.input_ids) + sum(len(t.ids) for t in ep.turns)) + sum(
                len(item[k] or "") for k in JSON_FIELDS
            )
        else:
            item = (_dumps(row) + "\n").encode("utf-8")
            size = len(item)
        with self._lock:
            if self._closed:
                raise ValueError(f"{self.path}: write to a closed LogWriter")
            self._pending.append(item)
            self._pending_bytes += size
            self.records += 1
            if self._pending_bytes >= self.buffer_bytes:
                self._drain(seal=False)

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
        if isinstance(sampled, (str, bytes)) or (not isinstance(sampled, Sequence) and not hasattr(sampled, "tolist")):
            raise TypeError("sampled must be a list of per-turn id lists")
        per_turn = [sampled[k] for k in range(len(sampled))]
        for name, values in (("logprobs", logprobs), ("prompt_ids", prompt_ids)):
            if values is not None and len(values) != len(per_turn):
                raise ValueError(f"{name} has {len(values)} entries for {len(per_turn)} sampled turns")
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

    @staticmethod
    def _parquet_row(row: dict[str, Any]) -> dict[str, Any]:
        out = {k: row.get(k) for k in ("id", "turns", "input_ids", "loss_mask")}
        for k in JSON_FIELDS:
            out[k] = _dumps(row[k]) if row.get(k) is not None else None
        return out

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
        if seal and self.format == "parquet":
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
