"""The versioned machine-readable report (schema: docs/json-schema.md).

A non-finite float (NaN, infinity) has no JSON spelling: Python's ``json`` would write a bare ``NaN`` that other
parsers refuse. Such a value is written as ``null`` (no number), and ``allow_nan=False`` makes any that slipped
through an error rather than an invalid report.
"""

from __future__ import annotations

import json as _json
import math
from typing import TYPE_CHECKING, Any

from tito_audit.registry import OUTPUT_FORMATS

if TYPE_CHECKING:
    from tito_audit.report.model_report import AuditReport


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (dicts, lists and tuples walked)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def to_json(report: AuditReport, **_: Any) -> str:
    return _json.dumps(finite(report.to_dict()), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


OUTPUT_FORMATS.register(
    "json",
    "the whole report as JSON (docs/json-schema.md, docs/report.schema.json)",
    to_json,
    doc=__doc__,
    order=20,
)
