"""Rendering: chat templates run only through transformers' sandboxed renderer, with a pinned date and limits."""

from tito_audit.rendering.guard import RenderLimits
from tito_audit.rendering.renderer import DEFAULT_DATE, Renderer, RenderError

__all__ = ["DEFAULT_DATE", "RenderError", "RenderLimits", "Renderer"]
