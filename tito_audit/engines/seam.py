"""``EngineRenderer``: an engine's renders behind the ``Renderer`` API that every check and the simulation use.

A library that renders token ids (mistral-common, openai-harmony, ``renderers``) is shown to the checks as the
text its ids decode to, with the model's tokenizer; every encode of that exact text gives back the library's ids
(with offsets from the decoded pieces), so a check that encodes a render compares the engine's own tokens, never
a re-encoding of them. A library that renders text (a Python encoder) is encoded with the model's tokenizer, as
the engine does. Caching, the time and size bounds and the classification of failures are ``Renderer``'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tito_audit.errors import RendererRefused, RenderError
from tito_audit.rendering.analysis import transformers_compiles
from tito_audit.rendering.guard import RenderLimits
from tito_audit.rendering.renderer import Message, Renderer, _Shared

if TYPE_CHECKING:
    from tito_audit.engines.base import Engine


class _EngineShared(_Shared):
    """``Renderer``'s shared caches, plus the engine's ids of each text it rendered. No template to prepare or
    analyse: the engine is given the tools on every render."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer, "")
        self.engine_ids: dict[str, tuple[int, ...]] = {}
        self.offsets: dict[str, list[tuple[int, int]]] = {}

    @property
    def compiles_seen(self) -> int:
        """Always current: there is no compiled template for ``Renderer._guarded`` to prepare again."""
        return transformers_compiles()

    @compiles_seen.setter
    def compiles_seen(self, value: int) -> None:
        pass

    @property
    def reads_tools(self) -> bool:
        return True


class EngineRenderer(Renderer):
    """Renders through ``engine``; encodes and decodes with the model's tokenizer."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        template_kwargs: dict[str, Any] | None = None,
        date: dt.datetime | None = None,
        limits: RenderLimits | None = None,
        _shared: _EngineShared | None = None,
    ) -> None:
        from tito_audit.rendering.clock import DEFAULT_DATE

        shared = _shared or _EngineShared(tokenizer)
        super().__init__(tokenizer, "", template_kwargs, date or DEFAULT_DATE, limits, shared)
        self.engine = engine
        self._engine_shared = shared

    def _derive(self, template_kwargs: dict[str, Any], date: dt.datetime) -> Renderer:
        import json

        key = json.dumps([template_kwargs, date.isoformat()], sort_keys=True, default=repr)
        hit = self._shared.derived.get(key)
        if hit is None:
            hit = EngineRenderer(self.engine, self.tokenizer, template_kwargs, date, self.limits, self._engine_shared)
            self._shared.derived[key] = hit
        return hit

    def _guarded(self, run: Callable[[], Any], template_code: bool = True) -> Any:
        """``Renderer._guarded``; a refusal by the engine's library is a ``raised`` render error (the library
        refused the conversation, as a template's ``raise_exception`` does), not a crash."""
        try:
            return super()._guarded(run, template_code)
        except RenderError as err:
            if isinstance(err.__cause__, RendererRefused):
                raise RenderError("raised", err.__cause__.message) from None
            raise

    def _text(self, messages: Sequence[Message], tools: Any, agp: bool, kwargs: dict[str, Any]) -> str:
        out = self.engine.render(list(messages), list(tools) if tools else None, agp, dict(kwargs), self.date)
        if out.ids is not None:
            ids = tuple(int(i) for i in out.ids)
            text = self._decoded(ids)
        else:
            text = out.text or ""
            ids = tuple(self._shared.cache.encode(text))
        self._engine_shared.engine_ids.setdefault(text, ids)
        return text

    def _sanitized(self, key: bytes | str, messages: Sequence[Message], tools: Any, agp: bool) -> list[int]:
        """The engine's own ids: how it encodes control-token text in content is its behaviour, not ours to fix."""
        return list(self._engine_shared.engine_ids[self._render(key, messages, tools, agp)])

    def render_with_mask(self, messages: Sequence[Message], tools: Any = None) -> tuple[list[int], list[int]]:
        raise RenderError("raised", f"renderer {self.engine.name} gives no assistant mask")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        hit = None if add_special_tokens else self._engine_shared.engine_ids.get(text)
        return list(hit) if hit is not None else super().encode(text, add_special_tokens)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        ids = self._engine_shared.engine_ids.get(text)
        if ids is None:
            return super().encode_with_offsets(text)
        return list(ids), list(self._offsets(text, ids))

    def encode_window(self, text: str, start: int, end: int) -> tuple[list[int], list[tuple[int, int]]]:
        if text in self._engine_shared.engine_ids:
            return self.encode_with_offsets(text)  # every token: a superset of the window
        return super().encode_window(text, start, end)

    def _offsets(self, text: str, ids: tuple[int, ...]) -> list[tuple[int, int]]:
        """Character span of each id in ``text``, from the decoded pieces. Ids that decode only together (a
        character cut across byte-level tokens) share the span of the group."""
        memo = self._engine_shared.offsets
        hit = memo.get(text)
        if hit is not None:
            return hit
        cache = self._shared.cache
        out: list[tuple[int, int]] = []
        at, group = 0, []
        for tid in ids:
            group.append(tid)
            piece = cache.piece(tid) if len(group) == 1 else self._decoded(group)
            if not text.startswith(piece, at):
                continue  # an incomplete character: wait for the ids that finish it
            end = at + len(piece)
            out += [(at, end)] * len(group)
            at, group = end, []
        if group or at != len(text):  # pieces that do not add up to the text (a tokenizer that decodes in context)
            out = []
            for k in range(len(ids)):
                out.append((len(self._decoded(ids[:k])), len(self._decoded(ids[: k + 1]))))
        memo[text] = out
        return out

    def _decoded(self, ids: Sequence[int]) -> str:
        return self._shared.cache.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
