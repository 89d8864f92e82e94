"""Which log format a record is in, and the episodes it holds: read from the registry
(``tito_audit.registry.LOG_FORMATS``) that each module of ``tito_audit.replay.log_formats`` registers one format
in (native, vLLM, SkyRL; field names from the frameworks' own source, in each module's docstring).

``--log-format auto`` asks each format, in the registry's order, whether it recognises the record; a record no
format recognises is a ``RecordError`` that names what a record may be.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tito_audit.replay.log_formats import LOG_FORMATS
from tito_audit.replay.schema import Episode, RecordError

AUTO = "auto"  # --log-format's default: each record's format is detected
ADAPTERS = (AUTO, *(e.name for e in LOG_FORMATS.require().ordered()))  # what --log-format takes


def detect(record: Any) -> str:
    """Which format reads this record; ``RecordError`` when none does."""
    formats = LOG_FORMATS.require().ordered()
    for entry in formats:
        if entry.meta["recognises"](record):
            return entry.name
    if not isinstance(record, Mapping):
        others = " or ".join(e.meta["not_an_object"] for e in formats if "not_an_object" in e.meta)
        raise RecordError(
            f"a record must be a JSON object{f' (or {others})' if others else ''}, not {type(record).__name__}"
        )
    keys = ", ".join(sorted(map(str, record))[:8])
    raise RecordError(f"unknown record layout (keys: {keys}); use --map or --log-format (see docs/replay.md)")


def to_episodes(record: Any, line: int, fmt: str = AUTO) -> list[Episode]:
    """The episodes in one record (a SkyRL batch holds several)."""
    entry = LOG_FORMATS.get(detect(record) if fmt == AUTO else fmt)
    if entry is None:
        raise ValueError(f"unknown log format {fmt!r} (one of: {', '.join(ADAPTERS)})")
    episodes: list[Episode] = entry.obj(record, line)
    return episodes
