"""Rendering: chat templates run only through transformers' sandboxed renderer, with a pinned date and limits.

The renderer (jinja2, and transformers on first use) is imported when first asked for, so that reading the
default date (``clock``) costs nothing."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tito_audit.rendering.clock import DEFAULT_DATE

if TYPE_CHECKING:
    from tito_audit.errors import RenderError
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.rendering.renderer import Renderer

_EXPORTS = {
    "RenderError": "tito_audit.errors",
    "RenderLimits": "tito_audit.rendering.guard",
    "Renderer": "tito_audit.rendering.renderer",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["DEFAULT_DATE", "RenderError", "RenderLimits", "Renderer"]
