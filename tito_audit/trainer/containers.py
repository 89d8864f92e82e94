"""The three containers a replay log is written in, behind one interface (``Container``): JSONL, gzip JSONL and
Parquet. ``LogWriter`` (``writer``) buffers records and rotates parts; what differs between containers (how a
record is encoded and sized, how a part is opened, appended to and sealed, how parts are named and numbered) is
here, once per container.

Why each part survives a crash: JSONL and gzip JSONL parts are appended through an ``O_APPEND`` descriptor, one
``write`` per chunk (complete lines; one complete gzip member), and a part reopened after a crash has its
partial tail cut off first (``JsonLines``); a Parquet part is written under a temporary name and linked to its own
when its footer is written (``ParquetPart``).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from tito_audit.replay.reader import GZIP_MAGIC, PARQUET_MAGIC

LogFormat = Literal["jsonl", "jsonl.gz", "parquet"]
FORMATS: tuple[LogFormat, ...] = ("jsonl", "jsonl.gz", "parquet")
JSON_FIELDS = ("messages", "tools", "chat_template_kwargs", "metadata")  # JSON text in Parquet (free-form objects)
_JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonlines")

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


def split_name(path: Path, fmt: LogFormat) -> tuple[str, str]:
    """(stem, extension) with the whole format extension, e.g. ``rollouts`` + ``.jsonl.gz``."""
    name = path.name
    ext = CONTAINERS[fmt].extension
    if fmt != "parquet":
        inner = name[: len(name) - len(ext)] if ext else name
        suffix = next((s for s in _JSONL_SUFFIXES if inner.lower().endswith(s)), "")
        ext = suffix + ext
    return name[: len(name) - len(ext)] if ext else name, ext


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


def lock_exclusive(fd: int, path: Path) -> None:
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


class JsonLines:
    """One JSONL (or gzip JSONL) part, appended through an ``O_APPEND`` descriptor, one ``write`` per chunk."""

    def __init__(self, path: Path, gz: bool, fsync: bool) -> None:
        self.path, self.gz, self.fsync = path, gz, fsync
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            lock_exclusive(self.fd, path)
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


class ParquetPart:
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


Part = JsonLines | ParquetPart


class Container:
    """What one container does differently. ``parts``: always written in numbered parts (Parquet: a part is
    readable only once sealed); ``seal_on_flush``: ``flush`` seals the current part; ``first_part``: the part
    number to go on in when no part exists yet (Parquet: the one before the first, a new part always follows)."""

    name: LogFormat
    extension = ""
    parts = False
    seal_on_flush = False
    first_part = 0

    def check_available(self, path: Path) -> None:
        """Raise where a library this container needs is missing."""

    def encode(self, row: dict[str, Any]) -> tuple[Any, int]:
        """A native record as this container buffers it, and the bytes it counts for (rotation, buffering)."""
        line = (_dumps(row) + "\n").encode("utf-8")
        return line, len(line)

    def open(self, path: Path, fsync: bool, free: Callable[[], Path]) -> Part:
        """The part at ``path`` (``free``: the next part name no file holds)."""
        return JsonLines(path, gz=False, fsync=fsync)


class Jsonl(Container):
    name: LogFormat = "jsonl"


class GzipJsonl(Container):
    name: LogFormat = "jsonl.gz"
    extension = ".gz"

    def open(self, path: Path, fsync: bool, free: Callable[[], Path]) -> Part:
        return JsonLines(path, gz=True, fsync=fsync)


class Parquet(Container):
    name: LogFormat = "parquet"
    extension = ".parquet"
    parts = True
    seal_on_flush = True
    first_part = -1

    def check_available(self, path: Path) -> None:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ImportError(
                f"{path}: a Parquet log needs pyarrow (pip install 'tito-audit[parquet]'); or write .jsonl.gz"
            ) from None

    def encode(self, row: dict[str, Any]) -> tuple[Any, int]:
        out = {k: row.get(k) for k in ("id", "turns", "input_ids", "loss_mask")}
        for k in JSON_FIELDS:
            out[k] = _dumps(row[k]) if row.get(k) is not None else None
        ids = len(row["input_ids"]) + sum(len(t["ids"]) for t in row["turns"])
        return out, 4 * ids + sum(len(out[k] or "") for k in JSON_FIELDS)

    def open(self, path: Path, fsync: bool, free: Callable[[], Path]) -> Part:
        return ParquetPart(path, fsync, free)


CONTAINERS: dict[LogFormat, Container] = {c.name: c for c in (Jsonl(), GzipJsonl(), Parquet())}


def container(fmt: str) -> Container:
    if fmt not in CONTAINERS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    return CONTAINERS[fmt]
