"""A toy log format, ``--log-format toy``: a native record nested under ``toy_episode``.

Dropped into ``tito_audit/replay/log_formats/``, this module is all it takes: ``tito-audit replay --help`` lists
it, ``--log-format auto`` detects it and the episodes are replayed (tests/test_registry.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tito_audit.registry import LOG_FORMATS
from tito_audit.replay.schema import Episode, episode_from_native


def recognises(record: Any) -> bool:
    return isinstance(record, Mapping) and isinstance(record.get("toy_episode"), Mapping)


def read(record: Any, line: int) -> list[Episode]:
    return [episode_from_native(record["toy_episode"], line, source="toy")]


LOG_FORMATS.register(
    "toy", "a native record under toy_episode (a toy)", read, order=90, meta={"recognises": recognises}
)
