"""From check results to one word per model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from tito_audit.checks.base import CheckResult

Verdict = Literal["unsafe", "tito-required", "safe", "error"]

VERDICTS: dict[str, str] = {
    "unsafe": "even buffer + delta breaks for tool appends: the template must be patched",
    "tito-required": "buffer + delta is exact, naive re-tokenization is not: keep a token buffer",
    "safe": "buffer + delta and naive re-tokenization are both exact for canonical tokens",
    "error": "the model could not be audited",
}


def decide(checks: Sequence[CheckResult]) -> Verdict:
    by_id = {c.id: c for c in checks}
    append = by_id.get("tool_append_prefix")
    naive = by_id.get("naive_rerender")
    if append is None or append.status == "error":
        return "error"
    if append.status == "fail":
        return "unsafe"
    naive_diverges = naive is not None and any(f for f in naive.findings)
    history = by_id.get("history_rewrite")
    if naive_diverges or (history is not None and history.findings):
        return "tito-required"
    return "safe"
