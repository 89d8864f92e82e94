"""Output formats: every one renders the same ``AuditReport``."""

from collections.abc import Callable

from tito_audit.audit import AuditReport
from tito_audit.formats.json import to_json
from tito_audit.formats.terminal import to_terminal

FORMATTERS: dict[str, Callable[..., str]] = {"json": to_json, "terminal": to_terminal}


def render_report(report: AuditReport, fmt: str, **options: object) -> str:
    try:
        formatter = FORMATTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATTERS)})") from None
    return formatter(report, **options)


__all__ = ["FORMATTERS", "render_report"]
