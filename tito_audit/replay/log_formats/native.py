"""The native log format (``tito_audit.replay.schema``).

The record [above](#the-native-record): the turns the engine sampled beside what the trainer trained on, as
``LogWriter`` and ``tito_audit.replay.record_from_trajectory`` write it; the layout every other format, and
``--map``, is read into.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tito_audit.registry import LOG_FORMATS
from tito_audit.replay.schema import Episode, episode_from_native


def recognises(record: Any) -> bool:
    return isinstance(record, Mapping) and "turns" in record and "input_ids" in record


def read(record: Any, line: int) -> list[Episode]:
    return [episode_from_native(record, line)]


LOG_FORMATS.register(
    "native",
    "the native record: turns sampled, input_ids and loss_mask trained",
    read,
    order=10,
    doc=__doc__,
    meta={"recognises": recognises, "title": "native"},
)
