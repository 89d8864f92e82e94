"""``--map``: point the native field names at a user's own record layout.

A map is ``NATIVE=PATH`` pairs (command line, comma separated or repeated) or a JSON object in a file
(``--map @fields.json``). PATH is a dotted path into the record, list indices allowed (``rollout.0.ids``).
``turns.ids`` / ``turns.logprobs`` / ``turns.prompt_ids`` name the fields inside each element of ``turns``::

    --map input_ids=batch.tokens,loss_mask=batch.mask,turns=samples,turns.ids=token_ids,turns.logprobs=lp

Fields the map does not name keep their native names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tito_audit.replay.schema import NATIVE_FIELDS, RecordError

TURN_FIELDS = ("ids", "logprobs", "prompt_ids")
_MISSING = object()


class MapError(ValueError):
    """The map itself is wrong (unknown native field, empty path); reported before any record is read."""


@dataclass(frozen=True)
class FieldMap:
    paths: dict[str, str] = field(default_factory=dict)  # native field -> dotted path
    turn_paths: dict[str, str] = field(default_factory=dict)  # ids/logprobs/prompt_ids -> path inside a turn

    @classmethod
    def parse(cls, specs: Sequence[str]) -> FieldMap:
        pairs: dict[str, str] = {}
        for spec in specs:
            if spec.startswith("@"):
                pairs.update(_from_file(Path(spec[1:])))
                continue
            for part in filter(None, (p.strip() for p in spec.split(","))):
                key, sep, path = part.partition("=")
                if not sep or not key.strip() or not path.strip():
                    raise MapError(f"--map: expected NATIVE=PATH, got {part!r}")
                pairs[key.strip()] = path.strip()
        paths: dict[str, str] = {}
        turn_paths: dict[str, str] = {}
        for key, path in pairs.items():
            if key.startswith("turns."):
                sub = key.removeprefix("turns.")
                if sub not in TURN_FIELDS:
                    raise MapError(f"--map: unknown turn field {key!r} (known: turns.{', turns.'.join(TURN_FIELDS)})")
                turn_paths[sub] = path
            elif key in NATIVE_FIELDS:
                paths[key] = path
            else:
                raise MapError(f"--map: unknown native field {key!r} (known: {', '.join(NATIVE_FIELDS)})")
        return cls(paths, turn_paths)

    def __bool__(self) -> bool:
        return bool(self.paths or self.turn_paths)

    def apply(self, record: Any) -> dict[str, Any]:
        """The record with native names; a mapped path that is absent is a ``RecordError`` naming it."""
        if not isinstance(record, Mapping):
            raise RecordError(f"a record must be a JSON object, not {type(record).__name__}")
        out = {k: v for k, v in record.items() if k in NATIVE_FIELDS and k not in self.paths}
        for native, path in self.paths.items():
            value = lookup(record, path)
            if value is _MISSING:
                raise RecordError(f"mapped field {native}={path}: no {path!r} in this record")
            out[native] = value
        if self.turn_paths and isinstance(out.get("turns"), Sequence):
            turns = []
            for k, t in enumerate(out["turns"]):
                mapped: dict[str, Any] = {}
                for sub in TURN_FIELDS:
                    path = self.turn_paths.get(sub, sub)
                    value = lookup(t, path)
                    if value is _MISSING:
                        if sub in self.turn_paths and sub == "ids":
                            raise RecordError(f"mapped field turns.ids={path}: no {path!r} in turns[{k}]")
                        continue
                    mapped[sub] = value
                turns.append(mapped)
            out["turns"] = turns
        return out


def lookup(obj: Any, path: str) -> Any:
    """``obj`` followed along a dotted path (keys, or list indices); ``_MISSING`` when a step is absent."""
    for step in path.split("."):
        if isinstance(obj, Mapping):
            if step not in obj:
                return _MISSING
            obj = obj[step]
        elif isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)) and step.lstrip("-").isdigit():
            i = int(step)
            if not -len(obj) <= i < len(obj):
                return _MISSING
            obj = obj[i]
        else:
            return _MISSING
    return obj


def _from_file(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MapError(f"--map @{path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise MapError(f"--map @{path}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise MapError(f"--map @{path}: expected a JSON object of NATIVE: PATH strings")
    return {str(k): v for k, v in data.items()}
