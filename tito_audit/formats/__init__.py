"""Output formats: every one renders the same ``AuditReport``.

Each formatter's module is imported when its format is asked for: a cold ``audit -q`` on a terminal should not
pay for the HTML, Markdown and SARIF writers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tito_audit.report.model_report import AuditReport

# format name -> (module, function)
FORMATTERS: dict[str, tuple[str, str]] = {
    "terminal": ("tito_audit.formats.terminal", "to_terminal"),
    "json": ("tito_audit.formats.json", "to_json"),
    "markdown": ("tito_audit.formats.markdown", "to_markdown"),
    "html": ("tito_audit.formats.html", "to_html"),
    "sarif": ("tito_audit.formats.sarif", "to_sarif"),
}


def formatter(fmt: str) -> Callable[..., str]:
    try:
        module, name = FORMATTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATTERS)})") from None
    function: Callable[..., str] = getattr(importlib.import_module(module), name)
    return function


def render_report(report: AuditReport, fmt: str, **options: object) -> str:
    return formatter(fmt)(report, **options)


__all__ = ["FORMATTERS", "formatter", "render_report"]
