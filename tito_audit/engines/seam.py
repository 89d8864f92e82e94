"""``EngineRenderer``: an engine's renders behind the ``Renderer`` API that every check and the simulation use.

A library that renders token ids (mistral-common, openai-harmony, ``renderers``) is shown to the checks as the
text its ids decode to, with the model's tokenizer; every encode of that exact text gives back the library's ids
(with offsets from the decoded pieces), so a check that encodes a render compares the engine's own tokens, never
a re-encoding of them. A library that renders text (a Python encoder) is encoded with the model's tokenizer, as
the engine does. Either way ``render_ids`` is what the engine feeds the model, control-token text in content
included; ``sanitized_ids`` is the safe encoding it is compared with (``special_token_injection``).

Every render (``render_once``) gives the engine deep copies of the conversation, the tools and the options (an
engine that edits its inputs in place cannot change the audit's scenarios, or what another render sees), with
Python's wall clock stopped at the render's date (``wall_clock``). An option the engine does not take
(``Engine.takes_option``) is not given to it and is listed in ``not_given``. Caching, the time and size bounds
and the classification of failures are ``Renderer``'s.
"""

from __future__ import annotations

import copy
import datetime as dt
import difflib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from tito_audit.engines import wall_clock
from tito_audit.engines.rendered import Rendered
from tito_audit.errors import RendererRefused, RenderError
from tito_audit.rendering.analysis import transformers_compiles
from tito_audit.rendering.clock import DEFAULT_DATE
from tito_audit.rendering.guard import RenderLimits
from tito_audit.rendering.renderer import Message, Renderer
from tito_audit.rendering.shared_state import SharedState


class Engine(Protocol):
    """What the seam needs of an engine (``tito_audit.engines.base.Engine`` is one): its name as given, one
    render, and whether it takes an option."""

    @property
    def name(self) -> str: ...

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered: ...

    def takes_option(self, name: str, value: Any) -> bool: ...


# Conversations an option is probed on (a reasoning switch, an option of a **kwargs encoder): a first prompt, a
# prompt after an answer that carried reasoning, and a prompt after a tool call and its result.
PROBES: tuple[tuple[tuple[Message, ...], bool], ...] = (
    (({"role": "user", "content": "Hi"},), True),
    (
        (
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello.", "reasoning_content": "Greet back."},
            {"role": "user", "content": "Again"},
        ),
        True,
    ),
    (
        (
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {}}}
                ],
            },
            {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "Sunny."},
        ),
        True,
    ),
)


def render_once(
    engine: Engine,
    messages: Sequence[Message],
    tools: Any,
    add_generation_prompt: bool,
    options: dict[str, Any],
    date: dt.datetime,
) -> Rendered:
    """One render by ``engine``, of copies of its inputs, under Python's wall clock stopped at ``date``."""
    given = copy.deepcopy((list(messages), list(tools) if tools else None, dict(options)))
    with wall_clock.stopped_at(date):
        return engine.render(given[0], given[1], add_generation_prompt, given[2], date)


def changes_a_probe(engine: Engine, options: dict[str, Any]) -> bool:
    """Whether ``options`` change a render of one of ``PROBES`` (a refused render counts as a change)."""
    for messages, agp in PROBES:
        try:
            plain = render_once(engine, messages, None, agp, {}, DEFAULT_DATE)
        except RendererRefused:
            continue
        try:
            given = render_once(engine, messages, None, agp, options, DEFAULT_DATE)
        except RendererRefused:
            return True
        if (given.text, given.ids) != (plain.text, plain.ids):
            return True
    return False


class _EngineShared(SharedState):
    """``Renderer``'s shared caches, plus the engine's ids of each text it rendered. No template to prepare or
    analyse: the engine is given the tools on every render."""

    def __init__(self, tokenizer: Any, limits: RenderLimits | None = None) -> None:
        super().__init__(tokenizer, "", limits)  # the limits' per-template budget bounds the engine's renders too
        self.engine_ids: dict[str, tuple[int, ...]] = {}
        self.offsets: dict[str, list[tuple[int, int]]] = {}
        self.not_given: dict[str, str] = {}  # option -> why the engine was not given it

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

    @property
    def reads_clock(self) -> bool:
        """An engine's code may read the date any way (the audit stops its wall clock, ``engines.wall_clock``):
        each date is rendered on its own."""
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

        shared = _shared or _EngineShared(tokenizer, limits)
        super().__init__(tokenizer, "", template_kwargs, date or DEFAULT_DATE, limits, shared)
        self.engine = engine
        self._engine_shared = shared

    def with_marking(self, marks: bool) -> Renderer:
        """This renderer: ``render_ids`` is what the engine feeds the model whether or not a loop would mark
        control-token text (``sanitized_ids`` holds it to the safe encoding)."""
        return self

    def _derive(
        self, template_kwargs: dict[str, Any], date: dt.datetime, tools_as: Any = None, marks: bool | None = None
    ) -> Renderer:
        """``Renderer._derive``; a library takes tool declarations as they are (``tools_as`` is the Jinja path's
        adaptation for templates that read another schema: asking an engine for it is a bug), and renders its own
        ids (``marks`` changes nothing)."""
        import json

        if tools_as is not None:
            raise ValueError(f"{self.engine.name} takes tool declarations as they are; they cannot be converted")

        key = json.dumps([template_kwargs, date.isoformat()], sort_keys=True, default=repr)
        hit = self._shared.derived.get(key)
        if hit is None:
            hit = EngineRenderer(self.engine, self.tokenizer, template_kwargs, date, self.limits, self._engine_shared)
            self._shared.derived[key] = hit
        return hit

    def _guarded(self, run: Callable[[], Any], template_code: bool = True, replay: bool = False) -> Any:
        """``Renderer._guarded``; a refusal by the engine's library is a ``raised`` render error (the library
        refused the conversation, as a template's ``raise_exception`` does), not a crash."""
        try:
            return super()._guarded(run, template_code, replay)
        except RenderError as err:
            if isinstance(err.__cause__, RendererRefused):
                raise RenderError("raised", err.__cause__.message) from None
            raise

    @property
    def not_given(self) -> dict[str, str]:
        """Options of the audit this engine was not given, because it does not take them, each with why."""
        return dict(self._engine_shared.not_given)

    def _text(self, messages: Sequence[Message], tools: Any, agp: bool, kwargs: dict[str, Any]) -> str:
        options = {}
        for name, value in kwargs.items():
            if self.engine.takes_option(name, value):
                options[name] = value
            else:
                self._engine_shared.not_given.setdefault(name, f"{self.engine.name} takes no option {name}")
        out = render_once(self.engine, messages, tools, agp, options, self.date)
        if out.ids is not None:
            ids = tuple(int(i) for i in out.ids)
            text = self._decoded(ids)
        else:
            text = out.text or ""
            ids = tuple(self._shared.cache.encode(text))
        self._engine_shared.engine_ids.setdefault(text, ids)
        return text

    def _sanitized(self, key: bytes | str, messages: Sequence[Message], tools: Any, agp: bool) -> list[int]:
        """``render_ids``: the engine's own ids, what it feeds the model. How it encodes control-token text in content
        is its behaviour, which ``sanitized_ids`` holds to the safe encoding."""
        return list(self._engine_shared.engine_ids[self._render(key, messages, tools, agp)])

    def sanitized_ids(
        self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """The safe encoding of what the engine feeds the model: its ids (a library's own, or a text render encoded
        plainly) with every control token that control-token text in the conversation produced written as that
        text's plain encoding. Which tokens those are: the engine renders the conversation once more with each
        control-token text in its strings replaced by a placeholder; a control token of the render that lies where
        the two renders differ came from the conversation, one where they agree is the engine's own."""
        cache = self._shared.cache
        controls = cache.special_texts
        text = self.render(messages, tools, add_generation_prompt)
        ids, offsets = self.encode_with_offsets(text)
        placeholder = next((c for c in "#~@x" if not any(c in t for t in controls)), "\u2591")
        given = [list(messages), list(tools) if tools else None]
        defanged = _defanged(given, controls, placeholder)
        if defanged == given:
            return ids  # no control-token text in the conversation: nothing to forge
        other = self.render(defanged[0], defanged[1], add_generation_prompt)
        changed = [
            (i1, i2)
            for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, text, other, autojunk=False).get_opcodes()
            if tag != "equal" and i2 > i1
        ]
        out: list[int] = []
        for tid, (a, b) in zip(ids, offsets, strict=True):
            piece = text[a:b]
            if piece in controls and any(i1 < b and a < i2 for i1, i2 in changed):
                plain = self._as_text(piece)
                if tid in plain:
                    raise RenderError("raised", f"the tokenizer encodes {piece!r} as that token even as plain text")
                out += plain
            else:
                out.append(tid)
        return out

    def _as_text(self, piece: str) -> list[int]:
        """``piece`` encoded as plain text (no added token matched), after a newline as transformers' sanitizer does
        (so a SentencePiece tokenizer adds no word-start space)."""
        cache = self._shared.cache
        newline = cache.encode_without_added_tokens("\n")
        ids = cache.encode_without_added_tokens("\n" + piece)
        return ids[len(newline) :] if ids[: len(newline)] == newline else ids

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


def _defanged(value: Any, controls: Sequence[str], placeholder: str) -> Any:
    """``value`` with each control-token text in its strings (not dict keys) replaced by ``placeholder`` as long."""
    if isinstance(value, str):
        for text in controls:  # longest first: a token is replaced before the shorter ones it holds
            if text in value:
                value = value.replace(text, placeholder * len(text))
        return value
    if isinstance(value, dict):
        return {key: _defanged(item, controls, placeholder) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_defanged(item, controls, placeholder) for item in value]
    return value
