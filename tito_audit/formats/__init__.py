"""Output formats: every one renders the same ``AuditReport``.

Each format module (``terminal``, ``json``, ``markdown``, ``html``, ``sarif``) registers itself in
``tito_audit.registry.OUTPUT_FORMATS``: its name (``--format NAME``), a one-line summary (``--help``), its writer
(``obj``: the report in, the text out). Importing this package imports every module in it, so ``OUTPUT_FORMATS``
here is complete and adding a format is adding a module. Every module here stays light at import (the report
layer and rich only): ``tito-audit --help`` and a cold ``audit -q`` import them all, so what only a writer needs
(pandas for Markdown tables, jinja2 templates for HTML, the checks for SARIF's rules) is imported by the writer.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING

from tito_audit.registry import OUTPUT_FORMATS

if TYPE_CHECKING:
    from tito_audit.report.model_report import AuditReport

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def formatter(fmt: str) -> Callable[..., str]:
    entry = OUTPUT_FORMATS.get(fmt)
    if entry is None:
        raise ValueError(f"unknown format {fmt!r} (choose from {OUTPUT_FORMATS.choices(', ')})")
    function: Callable[..., str] = entry.obj
    return function


def render_report(report: AuditReport, fmt: str, **options: object) -> str:
    return formatter(fmt)(report, **options)


__all__ = ["OUTPUT_FORMATS", "formatter", "render_report"]
