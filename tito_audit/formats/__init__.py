"""Output formats: every one renders the same ``AuditReport``."""

from collections.abc import Callable

from tito_audit.audit import AuditReport
from tito_audit.formats.compatibility import compatibility_table
from tito_audit.formats.html import to_html
from tito_audit.formats.json import to_json
from tito_audit.formats.markdown import to_markdown
from tito_audit.formats.sarif import to_sarif
from tito_audit.formats.terminal import to_terminal

FORMATTERS: dict[str, Callable[..., str]] = {
    "terminal": to_terminal,
    "json": to_json,
    "markdown": to_markdown,
    "html": to_html,
    "sarif": to_sarif,
}


def render_report(report: AuditReport, fmt: str, **options: object) -> str:
    try:
        formatter = FORMATTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATTERS)})") from None
    return formatter(report, **options)


__all__ = ["FORMATTERS", "compatibility_table", "render_report"]
