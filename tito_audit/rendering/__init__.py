"""Rendering: chat templates run only through transformers' sandboxed renderer, with a pinned date and limits.

The renderer (jinja2, and transformers on first use) is imported when first asked for, so that reading the
default date (``clock``) costs nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tito_audit.registry import lazy_exports
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


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = ["DEFAULT_DATE", "RenderError", "RenderLimits", "Renderer"]
