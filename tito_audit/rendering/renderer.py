"""``Renderer``: one model's rendering and encoding, as its RL stack would do them, with caching and bounds.

Every render is transformers' (``apply_chat_template``, or for text renders the compiled template given exactly
its inputs, each message prepared once: ``template_inputs``; its ImmutableSandboxedEnvironment either way), under
the render limits (``guard``), with the template's clock pinned (``analysis.prepare_for_renders``, again
whenever transformers may have compiled the template anew: its cache keeps 128); every failure becomes a
classified ``RenderError``. An audit renders the same conversations hundreds of times, so renders are cached per
(messages, tools, generation prompt, kwargs, date: where the template reads the clock) and shared by every renderer
derived with ``with_kwargs``/``with_date``; a failing render is cached too, so it is not retried. Encodes and
decodes are the tokenizer's (``tokenizer_cache``). Sanitized encoding (``render_ids``) is exactly the plain encoding
of the cached text render when marking control tokens changes nothing, so no second template run is needed;
otherwise ``sanitizer`` does it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from time import thread_time
from typing import Any

from jinja2 import TemplateError
from jinja2.exceptions import SecurityError

from tito_audit.errors import InternalError, RendererRefused, RenderError, detached, first_line
from tito_audit.rendering.analysis import prepare_for_renders, transformers_compiles
from tito_audit.rendering.bounded_cache import content_key
from tito_audit.rendering.budget import TemplateBudget
from tito_audit.rendering.clock import DEFAULT_DATE, pinned_date
from tito_audit.rendering.guard import RenderLimits, RenderTimeout, render_limits
from tito_audit.rendering.shared_state import SharedState as _Shared
from tito_audit.rendering.template_inputs import covered, render_text

# RenderError, tokenizer_cache and DEFAULT_DATE are also importable from here, where the package has long found them.
__all__ = ["Message", "Renderer"]

Message = dict[str, Any]
ToolsAs = tuple[str, Callable[[Any], Any]]  # a tool-declaration schema's name, and the conversion to it


def _key(messages: Sequence[Message], tools: Any, agp: bool, kwargs: dict[str, Any], date: str) -> bytes | str:
    """A cache key for one render, computed for every render call (hits included), so it must be cheap: the
    content key (``bounded_cache.content_key``), or ``repr`` for values marshal cannot write (``repr`` tells apart
    every value json would); the two kinds of key (bytes, str) never collide. ``date``: the render date's ISO
    text."""
    value = (messages if type(messages) is list else list(messages), tools, agp, kwargs, date)
    return content_key(value) or repr(value)


_TEMPLATE_CODE = "<template>"  # the file name jinja compiles a template's code under (``from_string``)
_OURS = os.path.realpath(Path(__file__).parents[1]) + os.sep  # this package's files


def _template_or_internal(exc: BaseException, template_code: bool = True) -> None:
    """Raise ``InternalError`` for an exception that is not the template's: none of its frames runs template code,
    and it is not a library's deliberate refusal of what a render gave it (a ``ValueError`` raised outside this
    package while rendering, as transformers refuses a final message the template deletes; never while encoding
    text a render already produced, ``template_code=False``). A ``TypeError`` inside transformers, or any exception
    from this package's code, is ours: reported as a check error, never as a template fault."""
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    if _TEMPLATE_CODE in frames or isinstance(exc, RendererRefused):  # a renderer library refusing a conversation
        return
    if template_code and isinstance(exc, ValueError) and frames and not os.path.realpath(frames[-1]).startswith(_OURS):
        return
    raise InternalError(f"{type(exc).__name__}: {first_line(exc)} (in {_where(frames)}, not in the template)") from exc


def _where(frames: list[str]) -> str:
    """The module an exception was raised in, as a short path."""
    if not frames:
        return "an unknown place"
    last = frames[-1]
    for marker in ("site-packages/", "tito_audit/"):
        if marker in last:
            return ("tito_audit/" if marker == "tito_audit/" else "") + last.split(marker, 1)[1]
    return last


def _cached_ids(
    cache: dict[bytes | str, tuple[int, ...] | RenderError], key: bytes | str, compute: Callable[[], Sequence[int]]
) -> list[int]:
    """``compute()`` once per key; its ids are kept as a tuple of ints (never walked by the garbage collector), a
    failure as the error, raised again on every later call."""
    hit = cache.get(key)
    if hit is None:
        try:
            hit = tuple(compute())
        except RenderError as err:
            hit = detached(err)
        cache[key] = hit
    if isinstance(hit, RenderError):
        raise _again(hit)
    return list(hit)


def _again(cached: RenderError) -> RenderError:
    """A cached failure raised once more, as a copy: raising the cached one would give it a traceback through
    this renderer's frames, a reference cycle through its caches (``errors.detached``)."""
    return RenderError(cached.kind, cached.message)


class Renderer:
    """Renders and encodes for one (tokenizer, template, template kwargs, date) combination."""

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str,
        template_kwargs: dict[str, Any] | None = None,
        date: dt.datetime = DEFAULT_DATE,
        limits: RenderLimits | None = None,
        _shared: _Shared | None = None,
        tools_as: ToolsAs | None = None,
        marks_control_tokens: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        self.date = date
        self.limits = limits or RenderLimits()
        # (name, convert): the tool declarations every render passes are converted to the schema the template
        # reads (``scenarios.adapt.TOOL_SCHEMAS``); None: as given
        self.tools_as = tools_as
        # ``render_ids`` as ``apply_chat_template(tokenize=True, sanitize_control_tokens=True)`` does (control-token
        # text in every string of the conversation marked, encoded as text), or, False, as its default does (the
        # render encoded plainly: what a loop that calls ``apply_chat_template`` as usual feeds the model)
        self.marks_control_tokens = marks_control_tokens
        if _shared is None:
            prepare_for_renders(chat_template, self.limits)
            _shared = _Shared(tokenizer, chat_template, self.limits)
        self._shared = _shared
        self._date_key = date.isoformat() if _shared.reads_clock else ""  # "": the template cannot see the date

    def _derive(
        self, template_kwargs: dict[str, Any], date: dt.datetime, tools_as: ToolsAs | None, marks: bool | None = None
    ) -> Renderer:
        marks = self.marks_control_tokens if marks is None else marks
        schema = tools_as[0] if tools_as else None
        key = json.dumps([template_kwargs, date.isoformat(), schema, marks], sort_keys=True, default=repr)
        hit = self._shared.derived.get(key)
        if hit is None:
            hit = Renderer(
                self.tokenizer, self.chat_template, template_kwargs, date, self.limits, self._shared, tools_as, marks
            )
            self._shared.derived[key] = hit
        return hit

    def with_marking(self, marks: bool) -> Renderer:
        """This renderer with ``render_ids`` marking control-token text in the conversation (``marks``:
        ``sanitize_control_tokens=True``) or encoding the render plainly (``apply_chat_template``'s default). Renders
        and their caches are shared."""
        if marks == self.marks_control_tokens:
            return self
        return self._derive(self.template_kwargs, self.date, self.tools_as, marks)

    def with_kwargs(self, **template_kwargs: Any) -> Renderer:
        return self._derive({**self.template_kwargs, **template_kwargs}, self.date, self.tools_as)

    def with_date(self, date: dt.datetime) -> Renderer:
        return self._derive(self.template_kwargs, date, self.tools_as)

    def with_tools_as(self, tools_as: ToolsAs | None) -> Renderer:
        """This renderer with tool declarations converted by ``tools_as`` (name, convert) on every render."""
        return self._derive(self.template_kwargs, self.date, tools_as)

    def _tools(self, tools: Any) -> Any:
        return self.tools_as[1](tools) if self.tools_as is not None and tools else tools

    @property
    def budget(self) -> TemplateBudget:
        """What this template has spent of its per-template budget (shared by every derived renderer)."""
        return self._shared.budget

    def _guarded(self, run: Any, template_code: bool = True, replay: bool = False) -> Any:
        """``run()`` under the pinned date and the render limits; every failure becomes a classified RenderError.
        A render of template code is charged to the template's budget (``budget``); once that is spent, the render
        is refused without running.

        ``template_code=False`` is for encoding text a guarded render already produced: no template code runs,
        so the time and memory budgets (set per call, at a cost) are left out; the size bound still applies.
        ``replay``: its CPU is charged, its characters are not: a render played again through coverage's copy
        (``trace_untraced``: the render it repeats was charged them), or a trial of a fixed screen (``render_trial``;
        the search's share of the characters is for the conversations it plays)."""
        if not template_code:
            return self._run_guarded(run, False)
        budget = self._shared.budget
        if budget.stopped is not None:
            raise budget.refusal()
        started = thread_time()
        try:
            out = self._run_guarded(run, True)
        except RenderError as err:
            budget.charge(thread_time() - started, err.kind == "timeout" or err.memory)
            raise
        produced = 0 if replay else len(out) if isinstance(out, str | list) else 0
        budget.charge(thread_time() - started, False, produced)
        return out

    def _limits_now(self) -> RenderLimits:
        """The render limits, the time limit cut to what is left of the template's budget."""
        seconds = self._shared.budget.render_seconds(self.limits.seconds)
        return self.limits if seconds >= self.limits.seconds else replace(self.limits, seconds=seconds)

    def _run_guarded(self, run: Any, template_code: bool) -> Any:
        limits = render_limits(self._limits_now()) if template_code else nullcontext()
        try:
            if template_code and transformers_compiles() != self._shared.compiles_seen:
                # transformers may have dropped the prepared template from its cache and compiled it anew. Prepared
                # again here, outside the render's limits: the compile has its own, and a nested time limit would
                # disarm the render's.
                prepare_for_renders(self.chat_template, self.limits)
                self._shared.compiles_seen = transformers_compiles()
            with pinned_date(self.date), limits:
                out = run()
        except RenderTimeout as exc:
            limits.__exit__(None, None, None)  # raised as the block was left, before its ``__exit__`` could run
            raise RenderError("timeout", str(exc)) from exc
        except SecurityError as exc:
            raise RenderError("security", f"sandbox refused: {first_line(exc)}") from exc
        except TemplateError as exc:
            raise RenderError("raised", first_line(exc)) from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as exc:
            _template_or_internal(exc, template_code)
            raise RenderError("type", f"{type(exc).__name__}: {first_line(exc)}") from exc
        except MemoryError as exc:
            error = RenderError("too_large", "render exhausted its memory budget")
            error.memory = True
            raise error from exc
        except OverflowError as exc:  # the sandbox's MAX_RANGE, or arithmetic past any sane size
            raise RenderError("too_large", f"OverflowError: {first_line(exc)}") from exc
        except RecursionError as exc:
            raise RenderError("too_large", "render recursed too deeply") from exc
        except Exception as exc:
            _template_or_internal(exc, template_code)
            raise RenderError("crash", f"{type(exc).__name__}: {first_line(exc)}") from exc
        size = len(out) if isinstance(out, str | list) else len(out.get("input_ids", out)) if hasattr(out, "get") else 0
        if size > self.limits.max_chars:
            raise RenderError("too_large", f"render produced {size:,} characters (limit {self.limits.max_chars:,})")
        return out

    def _apply(self, messages: Any, tools: Any, agp: bool, kwargs: dict[str, Any], **extra: Any) -> Any:
        return self.tokenizer.apply_chat_template(
            list(messages), tools=tools, chat_template=self.chat_template, add_generation_prompt=agp, **extra, **kwargs
        )

    def _text(self, messages: Sequence[Message], tools: Any, agp: bool, kwargs: dict[str, Any]) -> str:
        """``_apply(..., tokenize=False)``, with each input prepared once (``template_inputs``)."""
        return render_text(self.tokenizer, self.chat_template, messages, tools, agp, kwargs)

    def _keyed(self, messages: Sequence[Message], tools: Any, agp: bool) -> tuple[bytes | str, Any]:
        """The cache key of a render, and the tools to render with (``_render_tools``)."""
        tools = self._render_tools(tools)
        return _key(messages, tools, agp, self.template_kwargs, self._date_key), tools

    def _render_tools(self, tools: Any) -> Any:
        """The tools a text render passes: None for a template that never reads them, else converted (``_tools``)."""
        return self._tools(None if tools is not None and not self._shared.reads_tools else tools)

    def render(self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False) -> str:
        """Rendered text; raises RenderError (cached, so a failing render is not retried)."""
        key, tools = self._keyed(messages, tools, add_generation_prompt)
        return self._render(key, messages, tools, add_generation_prompt)

    def _render(self, key: bytes | str, messages: Sequence[Message], tools: Any, add_generation_prompt: bool) -> str:
        texts = self._shared.texts
        hit = texts.get(key)
        if hit is None:
            agp, kwargs, through = add_generation_prompt, self.template_kwargs, self._shared.through
            if through is None or not covered(self.tokenizer, messages, tools, kwargs):
                self._shared.untraced.append((kwargs, self.date, messages, tools, agp))
                through = None
            run = (
                (lambda: through(self, messages, tools, agp))
                if through
                else lambda: self._text(messages, tools, agp, kwargs)
            )
            try:
                hit = self._guarded(run)
            except RenderError as err:
                hit = detached(err)  # kept: its traceback would keep this renderer's frames (and caches) alive
            texts[key] = hit
        if isinstance(hit, RenderError):
            raise _again(hit)
        return hit

    def render_trial(
        self, messages: Sequence[Message], tools: Any, agp: bool, play: Any = None, chars: bool = True
    ) -> str:
        """A render that tests whether the template accepts a conversation (``audit.search.accepted``): limited and
        charged to the template's budget like any (its characters unless ``chars`` is False: ``audit.search.pairs``'
        fixed screen), neither cached nor played through template coverage's copy (it counts only the conversations
        an audit plays), unless through ``play`` (``Coverage.play``: a trial compared as a played render is)."""
        tools, kwargs = self._render_tools(tools), self.template_kwargs
        run = (lambda: play(self, messages, tools, agp)) if play else lambda: self._text(messages, tools, agp, kwargs)
        return str(self._guarded(run, replay=not chars))

    def render_through(self, play: Any) -> None:
        """Make each text render with ``play`` (``Coverage.play``: the same text, its arms recorded as it renders)
        instead of playing it through coverage's copy later, where ``render_text`` renders the compiled template
        itself (``covered``); None: as before."""
        self._shared.through = play

    def drop_untraced(self) -> int:
        """Forget the renders not played through coverage's copy yet (they will not count); returns how many."""
        dropped, self._shared.untraced = len(self._shared.untraced), []
        return dropped

    def trace_untraced(
        self, play: Callable[[Renderer, Sequence[Message], Any, bool], Any], done: Callable[[], bool] | None = None
    ) -> int:
        """Play every text render of this template not played yet through ``play(renderer, messages, tools,
        add_generation_prompt)`` (coverage's instrumented copy), under each render's limits and charged to the
        template's budget; returns how many. Their outputs are already cached: only what they run is wanted (a
        failing one counts as far as it goes). ``done``: asked before each render; once it says True, the rest
        are dropped unplayed (and not counted)."""
        pending, self._shared.untraced = self._shared.untraced, []
        played = 0
        for kwargs, date, messages, tools, agp in pending:
            if done is not None and done():
                return played
            played += 1
            r = self._derive(kwargs, date, self.tools_as)
            try:
                r._guarded(lambda r=r, m=messages, t=tools, a=agp: play(r, m, t, a), replay=True)
            except RenderError as err:
                detached(err)  # its tracebacks would hold this audit's frames in a cycle
                continue
        return played

    def render_ids(
        self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """Token ids of a render with control-token text in message content encoded as plain text.

        This is how environment messages must be encoded: a tool result that contains ``<|im_end|>`` must not
        become the control token. Falls back to plain encoding where the tokenizer cannot sanitize. A renderer
        that does not mark (``with_marking(False)``) encodes the render plainly, as ``apply_chat_template`` does by
        default.
        """
        key, tools = self._keyed(messages, tools, add_generation_prompt)
        if not self.marks_control_tokens:  # apply_chat_template(tokenize=True): the render encoded plainly
            return _cached_ids(
                self._shared.plain_ids, key, lambda: self._plain_ids(key, messages, tools, add_generation_prompt)
            )
        return _cached_ids(self._shared.ids, key, lambda: self._marked_ids(key, messages, tools, add_generation_prompt))

    def _plain_ids(self, key: bytes | str, messages: Sequence[Message], tools: Any, agp: bool) -> list[int]:
        """The render (cached under the same key) encoded plainly."""
        text = self._render(key, messages, tools, agp)
        return list(self._guarded(lambda: self.encode(text), template_code=False))

    def _marked_ids(self, key: bytes | str, messages: Sequence[Message], tools: Any, agp: bool) -> list[int]:
        """``_sanitized``, or the plain encoding where the template's own code fails on the marked content."""
        try:
            return self._sanitized(key, messages, tools, agp)
        except RenderError as err:
            if err.kind not in ("type", "crash"):
                raise
            return self.encode(self.render(messages, tools, agp))

    def sanitized_ids(
        self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """``render_ids`` without its fallback: raises RenderError when the render cannot be sanitized (for a check
        that compares sanitized with plain ids, a silent plain fallback would compare plain with plain)."""
        key, tools = self._keyed(messages, tools, add_generation_prompt)
        return self._sanitized(key, messages, tools, add_generation_prompt)

    def _sanitized(self, key: bytes | str, messages: Sequence[Message], tools: Any, agp: bool) -> list[int]:
        """``apply_chat_template(tokenize=True, sanitize_control_tokens=True)``, without redundant work."""
        markers = self._shared.cache.markers
        if not getattr(self.tokenizer, "is_fast", False) or markers == ():
            return self._apply_sanitized(messages, tools, agp)
        cache = self._shared.cache
        if not cache.any_mentions_added_tokens([*messages, self.template_kwargs, [] if tools is None else tools]):
            # Nothing to mark: the template sees exactly the plain inputs, and encode_marked_chat of text without
            # markers is the plain encoding.
            text = self._render(key, messages, tools, agp)  # the same key: render_ids' and render's agree
            if not any(m in text for m in markers):
                return list(self._guarded(lambda: self._shared.cache.encode(text), template_code=False))
        san = self._shared.sanitizer
        if san is None:
            return self._apply_sanitized(messages, tools, agp)
        *msgs, marked_tools, kwargs = san.mark_each([*messages, tools, self.template_kwargs])
        return list(self._guarded(lambda: san.encode(self._text(msgs, marked_tools, agp, kwargs))))

    def _apply_sanitized(self, messages: Sequence[Message], tools: Any, agp: bool) -> list[int]:
        """transformers does it all (tokenizers whose encoding path we do not reproduce)."""
        return list(
            self._guarded(
                lambda: self._apply(
                    messages,
                    tools,
                    agp,
                    self.template_kwargs,
                    tokenize=True,
                    return_dict=False,
                    sanitize_control_tokens=True,
                )
            )
        )

    def render_continuation(self, messages: Sequence[Message], tools: Any = None) -> str:
        """``apply_chat_template(continue_final_message=True)``: the render a loop gives an engine to continue the final
        (unterminated) assistant message, cut where transformers cuts it, under the same limits."""
        return str(
            self._guarded(
                lambda: self._apply(
                    messages, tools, False, self.template_kwargs, continue_final_message=True, tokenize=False
                )
            )
        )

    def render_with_mask(self, messages: Sequence[Message], tools: Any = None) -> tuple[list[int], list[int]]:
        """Ids and ``assistant_masks`` (``return_assistant_tokens_mask=True``), under the same limits."""
        tools = self._tools(tools)
        out = self._guarded(
            lambda: self._apply(
                messages,
                tools,
                False,
                self.template_kwargs,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )
        )
        return list(out["input_ids"]), list(out["assistant_masks"])

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Plain encoding, exactly what ``apply_chat_template(tokenize=True)`` does with rendered text."""
        return self._shared.cache.encode(text, add_special_tokens)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        return self._shared.cache.encode_with_offsets(text)

    def encode_window(self, text: str, start: int, end: int) -> tuple[list[int], list[tuple[int, int]]]:
        return self._shared.cache.encode_window(text, start, end)

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str:
        return self._shared.cache.decode(ids, **kwargs)

    def token_texts(self, ids: Sequence[int]) -> list[str]:
        """Each id decoded alone (what a token strip shows)."""
        piece = self._shared.cache.piece
        return [piece(i) for i in ids]
