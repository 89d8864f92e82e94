"""Stream the records of a rollout log, with bounded memory whatever the log holds.

A log is untrusted input: a record over ``max_record_bytes`` (default 64 MB, ``--max-record-mb``) is malformed,
named by its line and skipped, and the records after it are read; a compressed line that decompresses to
gigabytes is read and skipped in 1 MB pieces, never held whole. JSONL (optionally gzip) is read line by line;
Parquet row group by row group, in batches of ``PARQUET_BATCH`` rows, each row's size computed from the Arrow
buffers (``row_nbytes``) and bounded the same way. Every record comes with its 1-based line (JSONL) or row
(Parquet) number; a record that cannot be read comes back as a ``RecordError`` in its place, so the caller counts
it and goes on. A log that cannot be opened at all raises ``LogError`` (one line, exit 2).
"""

from __future__ import annotations

import glob
import json
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tito_audit.replay.schema import RecordError

PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_BATCH = 256
MAX_RECORD_BYTES = 64 << 20  # a record (JSONL line, Parquet row) over this is malformed; --max-record-mb
SKIP_PIECE = 1 << 20  # an oversized line is read past in pieces of this size

try:  # the fast parser when it is installed (pip install 'tito-audit[scale]'); json gives the error messages
    import orjson

    _FAST_LOADS: Any = orjson.loads
    _FAST_ERROR: type[Exception] = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - depends on the environment
    _FAST_LOADS, _FAST_ERROR = None, ValueError


class UncheckedTail(RecordError):
    """Not a record: the log's last gzip member is cut inside its trailer, so the records read from it (whole)
    could not be held to its checksum. Named beside the records, never counted as one."""


class LogError(Exception):
    """The log as a whole cannot be read (missing, unreadable, Parquet without pyarrow)."""


def expand(specs: Sequence[str | Path]) -> list[Path]:
    """The log files named: paths, or glob patterns (``'shards/*.parquet'``, sorted). ``LogError`` for a path that
    is not a file or a pattern that matches none."""
    out: list[Path] = []
    for spec in specs:
        text = str(spec)
        if glob.has_magic(text) and not Path(text).is_file():
            hits = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
            if not hits:
                raise LogError(f"{text}: no log file matches")
            out.extend(hits)
        elif Path(text).is_file():
            out.append(Path(text))
        elif Path(text).is_dir():
            raise LogError(f"{text}: is a directory, not a log file (give its files, or a pattern: '{text}/*.jsonl')")
        elif Path(text).exists():
            raise LogError(f"{text}: not a regular file (a FIFO or a device cannot be read twice): give a log file")
        else:
            raise LogError(f"{text}: no such log file")
    return out


def log_kind(path: Path) -> str:
    """``jsonl``, ``jsonl.gz`` or ``parquet``, from the first bytes (not the file name)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise LogError(f"{path}: cannot read the log: {exc.strerror or exc}") from None
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    if head.startswith(GZIP_MAGIC):
        return "jsonl.gz"
    return "jsonl"


def iter_records(path: Path, raw: bool = False, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[int, Any]]:
    """``(number, record)`` per record; ``record`` is a ``RecordError`` for one that cannot be read. With ``raw``,
    JSONL lines come back as ``bytes`` for ``parse_line`` (a parsed record is never bytes): parsing moves to the
    worker processes, and a line crosses the process boundary far cheaper than the objects parsed from it."""
    if log_kind(path) == "parquet":
        for first, batch, sizes in parquet_batches(path, max_record_bytes):
            if isinstance(batch, RecordError):
                yield first, batch
                return
            for k, row in enumerate(batch.to_pylist()):
                yield first + k, oversized(int(sizes[k]), max_record_bytes) or row
        return
    for n, line in iter_lines(path, max_record_bytes):
        yield n, line if raw or isinstance(line, RecordError) else parse_line(line)


def oversized(size: int, bound: int) -> RecordError | None:
    if size <= bound:
        return None
    return RecordError(
        f"record of {size / 2**20:.1f} MB is over the {bound / 2**20:g} MB bound (--max-record-mb); skipped"
    )


def parse_line(line: bytes | str) -> Any:
    """The record of one JSONL line, or a ``RecordError`` saying why it is not one."""
    if _FAST_LOADS is not None:
        try:
            return _FAST_LOADS(line)
        except _FAST_ERROR:
            pass  # json.loads accepts what orjson does not (NaN, huge integers) and words the error
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            return RecordError(f"not UTF-8 text ({exc.reason} at byte {exc.start})")
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        cut = "" if line.endswith("\n") else " (last line, no newline: truncated?)"
        return RecordError(f"not JSON: {exc.msg} at column {exc.colno}{cut}")


def iter_lines(path: Path, max_record_bytes: int = MAX_RECORD_BYTES) -> Iterator[tuple[int, bytes | RecordError]]:
    """Each non-blank line of a JSONL log (gzip-compressed or not) with its number, at most ``max_record_bytes``
    read at a time: a longer line is read past in pieces and comes back as a ``RecordError``. Gzip data is read
    member by member and a member's lines come out only once its checksum holds (``_gzip_pieces``): the lines of
    a member that fails it are each a ``RecordError``, never replayed."""
    if log_kind(path) == "jsonl.gz":
        yield from _gzip_lines(path, max_record_bytes)
        return
    n = 0
    with path.open("rb") as stream:
        while True:
            line = stream.readline(max_record_bytes + 1)
            if len(line) > max_record_bytes and not line.endswith(b"\n"):
                size = len(line) + _skip_line(stream)
                n += 1
                yield n, oversized(size, max_record_bytes) or RecordError("oversized record")
                continue
            if not line:
                return
            n += 1
            if line.strip():
                yield n, line


GZIP_HOLD = 16 << 20  # decompressed bytes of one gzip member held back until its checksum is checked
_READ = 1 << 16


class _Member:
    """Where one gzip member ends and what is wrong with it (``error`` None: its CRC32 and length hold)."""

    def __init__(self) -> None:
        self.end = 0
        self.error: str | None = None
        self.fatal = False  # the stream cannot be followed past it (truncated, not gzip, corrupt deflate data)
        self.trusted = False  # with an error: its data is still good (a stream cut short, as by a crash)
        self.in_trailer = False  # cut short inside its 8-byte trailer: all its data read, the checksum not checked

    def fail(self, error: str, fatal: bool = True, trusted: bool = False) -> None:
        self.error, self.fatal, self.trusted = error, fatal, trusted


_GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib reads the gzip header and checks the trailer (CRC32, length) itself
_CHECKSUM_ERRORS = ("incorrect data check", "incorrect length check")  # zlib's words for a trailer that fails


def _inflate(fh: Any, start: int, member: _Member) -> Iterator[bytes]:
    """The decompressed data of the member at ``start`` (``zlib`` in gzip mode: header, deflate data, CRC32 and
    length checked as it ends); what is wrong goes into ``member`` (the data already given is then not to be
    trusted). The member ends where zlib leaves ``unused_data``."""
    fh.seek(start)
    d = zlib.decompressobj(_GZIP_WBITS)
    pos = start
    while not d.eof:
        data = fh.read(_READ)
        if not data:
            member.in_trailer = _cut_in_trailer(fh, start, d)
            why = "the compressed stream ends early" + (" (in a gzip trailer)" if member.in_trailer else "")
            member.fail(why, trusted=True)
            return
        try:
            out = d.decompress(data)
        except zlib.error as exc:
            if not any(words in str(exc) for words in _CHECKSUM_ERRORS):
                header = "header check" in str(exc) or "compression method" in str(exc)
                member.fail("not gzip data" if header else f"the compressed data is corrupt ({exc})")
                return
            yield from _to_the_failing_byte(fh, start, pos, member, "data check" in str(exc))
            return
        pos += len(data)
        if out:
            yield out
    member.end = pos - len(d.unused_data)


def _to_the_failing_byte(fh: Any, start: int, last: int, member: _Member, crc: bool) -> Iterator[bytes]:
    """A member whose checksum fails (the rare path): zlib drops the output of the call that fails, so the member is
    read again from ``start`` and its last piece (at ``last``) fed byte by byte, for the rest of its output (to
    name each of its lines) and its end (after the byte that failed; the length follows a CRC32)."""
    fh.seek(start)
    d = zlib.decompressobj(_GZIP_WBITS)
    while fh.tell() < last:
        d.decompress(fh.read(min(_READ, last - fh.tell())))
    data = fh.read(_READ)
    for k in range(len(data)):
        try:
            out = d.decompress(data[k : k + 1])
        except zlib.error:
            member.end = last + k + 1 + (4 if crc else 0)
            break
        if out:
            yield out
    member.fail("its gzip member fails its checksum (CRC32 or length): the data is corrupt", fatal=False)


def _cut_in_trailer(fh: Any, start: int, d: Any) -> bool:
    """Whether a member that ends early ends in its 8-byte trailer (every byte of its data was read, the checksum
    could not be checked: the trailer's missing bytes, computed from the data, would end it), not before."""
    fh.seek(start)
    crc, size, again = 0, 0, zlib.decompressobj(_GZIP_WBITS)
    while data := fh.read(_READ):
        out = again.decompress(data)
        crc, size = zlib.crc32(out, crc), size + len(out)
    trailer = crc.to_bytes(4, "little") + (size & 0xFFFFFFFF).to_bytes(4, "little")
    for present in range(8):
        probe = d.copy()
        try:
            probe.decompress(trailer[present:])
        except zlib.error:
            continue
        if probe.eof:
            return True
    return False


def _gzip_pieces(path: Path) -> Iterator[tuple[bytes | None, _Member | None]]:
    """``(data, None)`` for good data, in order; ``(data, member)`` for the data of a member that failed its check
    (to count its lines, never to read them); ``(None, member)`` after a member with an error. A member's data is
    held back until its checksum is checked; one over ``GZIP_HOLD`` is checked to its end, then read again."""
    size = path.stat().st_size
    with path.open("rb") as fh:
        start = 0
        while start < size:
            member, held, total = _Member(), [], 0
            for out in _inflate(fh, start, member):
                total += len(out)
                if total <= GZIP_HOLD:
                    held.append(out)
                elif held:
                    held = []
            tag = None if member.error is None or member.trusted else member
            if total > GZIP_HOLD:
                for out in _inflate(fh, start, _Member()):
                    yield out, tag
            else:
                for out in held:
                    yield out, tag
            if member.error is not None:
                yield None, member
                if member.fatal:
                    return
            start = member.end


def _gzip_lines(path: Path, max_record_bytes: int) -> Iterator[tuple[int, bytes | RecordError]]:
    """``iter_lines`` of gzip data: the lines of a member that fails its checksum are each named, never given."""
    n = 0
    line = bytearray()
    skipped = -1  # >= 0: bytes of an oversized line being read past
    tainted = False  # the line in progress has bytes from a member that failed its check
    bad_lines, open_tail = 0, False  # in the failed member: newlines seen, and whether its data ends mid-line
    for data, member in _gzip_pieces(path):
        if data is not None and member is not None:
            bad_lines += data.count(b"\n")
            open_tail = data[-1:] != b"\n"
            continue
        if member is not None:  # a member ends with an error
            why = f"{member.error}; not replayed" + ("; nothing after it" if member.fatal else "")
            for _ in range(bad_lines):  # from the line in progress to its last newline: none is trusted
                n += 1
                yield n, RecordError(why)
                line.clear()
                skipped, tainted = -1, False
            tainted = tainted or (bad_lines == 0 and not member.trusted and bool(line or skipped >= 0)) or open_tail
            bad_lines, open_tail = 0, False
            if member.in_trailer and not tainted and skipped < 0:  # every record whole: the last one too
                yield from _unchecked_tail(n, line)
                return
            if member.fatal:
                yield n + 1, RecordError(why)
                return
            continue
        assert data is not None
        start = 0
        while start < len(data):
            cut = data.find(b"\n", start)
            end = len(data) if cut == -1 else cut + 1
            if skipped >= 0:
                skipped += end - start
            else:
                line += data[start:end]
                if len(line) - line.endswith(b"\n") > max_record_bytes:
                    skipped = len(line)
                    line.clear()
            start = end
            if cut == -1:
                break
            n += 1
            if tainted:
                yield n, RecordError("its gzip member fails its checksum (CRC32 or length): the data is corrupt; "
                                     "not replayed")  # fmt: skip
            elif skipped >= 0:
                yield n, oversized(skipped, max_record_bytes) or RecordError("oversized record")
            elif line.strip():
                yield n, bytes(line)
            line.clear()
            skipped, tainted = -1, False
    if skipped >= 0:
        yield n + 1, oversized(skipped, max_record_bytes) or RecordError("oversized record")
    elif tainted:
        yield n + 1, RecordError("its gzip member fails its checksum (CRC32 or length): the data is corrupt")
    elif line.strip():
        yield n + 1, bytes(line)


def _unchecked_tail(n: int, line: bytearray) -> Iterator[tuple[int, bytes | RecordError]]:
    """A log cut inside its last gzip trailer, after ``n`` whole lines and ``line`` (the last record, unended): the
    records are given, then one ``UncheckedTail`` (their checksum could not be checked), counted as no record."""
    if line.strip():
        n += 1
        yield n, bytes(line)
    yield (
        max(n, 1),
        UncheckedTail(
            f"the log ends inside its last gzip trailer (a crash while writing?): the {n} line(s) before "
            "it were read whole, but their checksum (CRC32, length) could not be checked"
        ),
    )


def _skip_line(stream: Any) -> int:
    """Read past the rest of a line, ``SKIP_PIECE`` bytes at a time; how many bytes it had."""
    skipped = 0
    while True:
        piece = stream.readline(SKIP_PIECE)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            return skipped


# -- Parquet ---------------------------------------------------------------------------------------------------


def open_parquet(path: Path) -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LogError(
            f"{path}: a Parquet log needs pyarrow (pip install 'tito-audit[parquet]'); or convert it to JSONL"
        ) from None
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError subclasses for bad files
        raise UnreadableParquet(path, f"not a readable Parquet file: {' '.join(str(exc).split())}") from None


class UnreadableParquet(LogError):
    """A Parquet file that does not open (a truncated footer, not Parquet at all). Among several logs it is one
    malformed record of its file (``record``), and the others are replayed (``parquet_batches``, ``run._tasks``);
    alone, nothing could be replayed."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.record = ParquetUnreadable(reason)


def parquet_batches(
    path: Path, max_record_bytes: int = MAX_RECORD_BYTES, batch_rows: int = PARQUET_BATCH
) -> Iterator[tuple[int, Any, Any]]:
    """``(number of the first row, RecordBatch, bytes per row)``, one row group at a time. A row group that cannot
    be decoded ends the file with a ``ParquetUnreadable`` in place of the batch (what was read is kept); a file
    that does not open is one, in place of its first batch."""
    try:
        pf = open_parquet(path)
    except UnreadableParquet as exc:
        yield 1, exc.record, None
        return
    n = 0
    for group in range(pf.num_row_groups):
        batches = pf.iter_batches(batch_size=batch_rows, row_groups=[group], use_threads=False)
        while True:
            try:
                batch = next(batches, None)
            except Exception as exc:  # a corrupt row group (pyarrow's errors): the rest of the file is reported
                yield n + 1, ParquetUnreadable(f"Parquet data unreadable from here on ({exc}); nothing after it"), None
                return
            if batch is None:
                break
            yield n + 1, batch, row_nbytes(batch)
            n += batch.num_rows


class ParquetUnreadable(RecordError):
    """The rest of a Parquet file cannot be decoded."""


def row_nbytes(batch: Any) -> Any:
    """Bytes each row of an Arrow batch holds (values, offsets, string bytes, nested lists and structs), computed
    from the buffers' offsets with numpy: no row is converted to Python to be measured."""
    import numpy as np

    total = np.zeros(batch.num_rows, dtype=np.int64)
    for col in batch.columns:
        total += _array_nbytes(col)
    return total


def _array_nbytes(arr: Any) -> Any:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t = arr.type
    n = len(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = np.asarray(arr.offsets, dtype=np.int64)  # absolute into arr.values, also for a sliced array
        width = 8 if pa.types.is_large_list(t) else 4
        item = _fixed_width(t.value_type)
        if item is not None:  # a list of numbers: its length times their width, no per-value array
            return np.diff(offsets) * item + width
        inner = np.concatenate(([0], np.cumsum(_array_nbytes(arr.values), dtype=np.int64)))
        return inner[offsets[1:]] - inner[offsets[:-1]] + width
    if pa.types.is_struct(t):
        out = np.zeros(n, dtype=np.int64)
        for child in arr.flatten():  # respects the struct's own offset
            out += _array_nbytes(child)
        return out
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        lengths = np.asarray(pc.binary_length(arr).fill_null(0), dtype=np.int64)
        return lengths + (8 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else 4)
    if pa.types.is_null(t):
        return np.zeros(n, dtype=np.int64)
    fixed = _fixed_width(t)
    if fixed is None:  # no fixed width (maps, dictionaries, unions): an even share of the array's bytes
        return np.full(n, arr.nbytes // max(1, n) + 1, dtype=np.int64)
    return np.full(n, fixed, dtype=np.int64)


def _fixed_width(t: Any) -> int | None:
    """Bytes per value of a fixed-width Arrow type (numbers, booleans as one), else None."""
    import pyarrow as pa

    if pa.types.is_nested(t) or pa.types.is_null(t):
        return None
    try:
        return max(1, t.bit_width // 8)
    except ValueError:
        return None
