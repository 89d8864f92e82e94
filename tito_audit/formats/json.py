"""The versioned machine-readable report (schema: docs/json-schema.md)."""

from __future__ import annotations

import json as _json
from typing import Any

from tito_audit.audit import AuditReport


def to_json(report: AuditReport, **_: Any) -> str:
    return _json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
