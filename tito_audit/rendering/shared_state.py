"""What every renderer derived from one ``Renderer(...)`` shares (``rendering.renderer``): its render caches, the
renderers derived from it, its sanitizer, its budget and the renders template coverage has yet to play.

Held apart from the renderer so that a derived renderer (another date, other template kwargs) costs a small object,
and so that an engine's seam can share the same state (``engines.seam``). It names no renderer (``derived`` holds
them as ``Any``): the renderer imports this module, and the design graph has no cycles.
"""

from __future__ import annotations

import datetime as dt
import weakref
from collections.abc import Sequence
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.analysis import loaded_names, transformers_compiles
from tito_audit.rendering.budget import TemplateBudget
from tito_audit.rendering.guard import RenderLimits
from tito_audit.rendering.sanitizer import Sanitizer, sanitizer_for
from tito_audit.rendering.tokenizer_cache import tokenizer_cache

Message = dict[str, Any]


class SharedState:
    """What every renderer derived from one ``Renderer(...)`` shares: render caches, derived renderers, sanitizer."""

    def __init__(self, tokenizer: Any, chat_template: str, limits: RenderLimits | None = None) -> None:
        self.cache = tokenizer_cache(tokenizer)
        self.texts: dict[bytes | str, str | RenderError] = {}
        self.ids: dict[bytes | str, tuple[int, ...] | RenderError] = {}  # marked (``sanitize_control_tokens``)
        self.plain_ids: dict[bytes | str, tuple[int, ...] | RenderError] = {}  # the render encoded plainly
        # held weakly: a derived renderer holds this, and a cycle would keep every cache of an audit alive until the
        # garbage collector finds it (one that is dropped is derived again, cheaply: the caches are here)
        self.derived: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._sanitizer: Sanitizer | None = None
        self._sanitizer_tried = False
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self._reads_tools: bool | None = None
        self._reads_clock: bool | None = None
        self.compiles_seen = transformers_compiles()  # the constructor has just prepared the template
        # Template coverage (``rendering.coverage``): the text renders not yet played through its instrumented copy
        # (the kwargs and date of the renderer, and the inputs; ``trace_untraced``). Only references: what a render
        # was given, never copied, and no renderer (which holds this: a cycle would keep an audit's caches alive).
        self.untraced: list[tuple[dict[str, Any], dt.datetime, Sequence[Message], Any, bool]] = []
        self.through: Any = None  # where set (``render_through``), text renders are made by it, not traced later
        limits = limits or RenderLimits()
        self.budget = TemplateBudget(
            limits.template_cpu_seconds, limits.template_limit_hits, limits.template_output_chars
        )

    @property
    def reads_tools(self) -> bool:
        """Whether the template reads ``tools`` at all. A template only sees context variables through names it
        loads, so one that never loads ``tools`` renders the same with tools=None, which spares copying and keying
        the tool schemas on every render."""
        if self._reads_tools is None:
            try:
                self._reads_tools = "tools" in loaded_names(self.chat_template)
            except Exception:  # does not parse: let the render report it, with the tools it was given
                self._reads_tools = True
        return self._reads_tools

    @property
    def reads_clock(self) -> bool:
        """Whether the template can see the render date. It sees it only through ``strftime_now`` (``clock``), a
        name it must load; one that never does renders alike at every date, so renders at another date
        (``Renderer.with_date``: the clock checks) are the cached ones, not template runs that cannot differ."""
        if self._reads_clock is None:
            try:
                self._reads_clock = "strftime_now" in loaded_names(self.chat_template)
            except Exception:  # does not parse: every date renders (and fails) on its own
                self._reads_clock = True
        return self._reads_clock

    @property
    def sanitizer(self) -> Sanitizer | None:
        if not self._sanitizer_tried:
            self._sanitizer_tried = True
            self._sanitizer = sanitizer_for(self.tokenizer, self.chat_template, self.cache)
        return self._sanitizer
