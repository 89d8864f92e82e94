"""Stream the records of a rollout log: JSONL (optionally gzip) or Parquet, one episode per record.

Constant memory: JSONL is read line by line, Parquet batch by batch. Every record comes with its 1-based line
(JSONL) or row (Parquet) number; a line that is not JSON comes back as a ``RecordError`` in its place, so the
caller counts it and goes on. A log that cannot be opened at all raises ``LogError`` (one line, exit 2).
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tito_audit.replay.schema import RecordError

PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_BATCH = 256


class LogError(Exception):
    """The log as a whole cannot be read (missing, unreadable, Parquet without pyarrow)."""


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


class RawLine(str):
    """A JSONL line not parsed yet (``parse_line`` does it where the record is analysed, e.g. in a worker)."""


def iter_records(path: Path, raw: bool = False) -> Iterator[tuple[int, Any]]:
    """``(number, record)`` per record; ``record`` is a ``RecordError`` for a line that does not parse. With
    ``raw``, JSONL lines come back as ``RawLine`` for ``parse_line``: parsing moves to the worker processes, and
    a line crosses the process boundary far cheaper than the objects parsed from it."""
    kind = log_kind(path)
    if kind == "parquet":
        yield from _parquet(path)
    else:
        yield from _jsonl(path, kind == "jsonl.gz", raw)


def parse_line(line: str) -> Any:
    """The record of one JSONL line, or a ``RecordError`` saying why it is not one."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        cut = "" if line.endswith("\n") else " (last line, no newline: truncated?)"
        return RecordError(f"not JSON: {exc.msg} at column {exc.colno}{cut}")


def _jsonl(path: Path, gz: bool, raw: bool = False) -> Iterator[tuple[int, Any]]:
    stream: Any = gzip.open(path, "rb") if gz else path.open("rb")  # noqa: SIM115 (closed by the with below)
    n = 0
    with stream, io.TextIOWrapper(stream, encoding="utf-8", errors="strict", newline="") as fh:
        while True:
            try:
                line = fh.readline()
            except (EOFError, OSError, zlib.error) as exc:  # truncated or corrupt gzip stream
                yield n + 1, RecordError(f"the compressed stream ends early or is corrupt ({exc}); nothing after it")
                return
            except UnicodeDecodeError as exc:
                n += 1
                yield n, RecordError(f"not UTF-8 text ({exc.reason}); the rest of the file is skipped")
                return
            if not line:
                return
            n += 1
            if not line.strip():
                continue
            yield n, RawLine(line) if raw else parse_line(line)


def _parquet(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LogError(
            f"{path}: a Parquet log needs pyarrow (pip install 'tito-audit[parquet]'); or convert it to JSONL"
        ) from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError subclasses for bad files
        raise LogError(f"{path}: not a readable Parquet file: {exc}") from None
    n = 0
    try:
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH):
            for row in batch.to_pylist():
                n += 1
                yield n, row
    except Exception as exc:  # a corrupt row group: what was read is kept, the rest is reported
        yield n + 1, RecordError(f"Parquet data unreadable from here on ({exc}); nothing after it")
