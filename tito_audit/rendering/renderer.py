"""One model's rendering and encoding, as its RL stack would do them, with caching and bounds.

Every render goes through ``tokenizer.apply_chat_template`` (transformers' ImmutableSandboxedEnvironment).
Templates that call ``strftime_now`` see a pinned date so that runs are reproducible; the date is swapped in
the compiled template's own globals, not by patching the clock.

An audit renders the same conversations and encodes the same text hundreds of times, so results are cached:
renders per (messages, tools, generation prompt, kwargs, date) and shared by every renderer derived with
``with_kwargs``/``with_date``; encodes, decodes and the added-token table per tokenizer (``TokenizerCache``).
Long texts are encoded by segments cut at control tokens (``segments``), which consecutive prefixes of one
conversation, and sibling templates in a scan, share.
Sanitized encoding (``render_ids``) reproduces ``apply_chat_template(tokenize=True,
sanitize_control_tokens=True)`` from transformers' own pieces (control tokens found once per template, strings
marked once): when marking changes nothing it is exactly the plain encoding of the cached text render, so no
second template run is needed. ``tests/test_renderer_caches.py`` holds it to transformers' result.
"""

from __future__ import annotations

import datetime as dt
import json
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import nullcontext
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.exceptions import SecurityError

from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.clock import DEFAULT_DATE, pinned_date, pinned_strftime
from tito_audit.rendering.guard import RenderLimits, RenderTimeout, harden_environment, render_limits
from tito_audit.rendering.segments import MIN_CHARS, SegmentedEncoder

Message = dict[str, Any]

_DECODE_CACHED = 256  # longer id sequences are decoded every time


@lru_cache(maxsize=1)
def control_markers() -> tuple[str, ...]:
    """The private-use characters ``sanitize_control_tokens`` wraps user control-token text in (none: no support).
    Asked for on first use, not at import: importing transformers costs most of a cold start."""
    try:
        from transformers.utils import chat_template_utils as ctu

        return (ctu._CONTROL_TOKEN_START, ctu._CONTROL_TOKEN_END)
    except (ImportError, AttributeError):
        return ()


class RenderError(Exception):
    """A template refused or failed to render a conversation; ``kind`` classifies why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "raised" | "type" | "security" | "timeout" | "too_large" | "crash"
        self.message = message


def _install_pinned_clock(template: str) -> None:
    from transformers.utils.chat_template_utils import _compile_jinja_template

    compiled = _compile_jinja_template(template)
    compiled.environment.globals["strftime_now"] = pinned_strftime
    harden_environment(compiled.environment)


@lru_cache(maxsize=8)
def parse_template(template: str) -> Any:
    """The syntax tree of a template, parsed once by the environment transformers compiles it with (so that its
    ``{% generation %}`` and loop-control tags parse); raises ``TemplateSyntaxError`` where it does not parse."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template(template).environment.parse(template)


def loaded_names(template: str) -> frozenset[str]:
    """Every variable name the template reads anywhere (a superset of ``template_variables``)."""
    from jinja2 import nodes

    return frozenset(n.name for n in parse_template(template).find_all(nodes.Name) if n.ctx == "load")


def template_variables(template: str) -> frozenset[str]:
    """Variables a template reads from its context (what ``transformers``' ``_get_template_variables`` returns)."""
    from jinja2 import meta

    return frozenset(meta.find_undeclared_variables(parse_template(template)))


def _key(messages: Sequence[Message], tools: Any, agp: bool, kwargs: dict[str, Any], date: dt.datetime) -> str:
    """A cache key for one render: ``repr`` tells apart every value json would (and tuples from lists)."""
    return repr((list(messages), tools, agp, kwargs, date.isoformat()))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


class TokenizerCache:
    """Pure functions of one tokenizer, computed once: encodes, decodes, vocabulary, added and special tokens."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = weakref.ref(tokenizer)  # the cache must not keep its (weak) key alive
        self.size = len(tokenizer)
        self._encodes = BoundedCache()
        self._offsets = BoundedCache(512)
        self._decodes = BoundedCache()
        self._fast_decode = bool(getattr(tokenizer, "is_fast", False)) and hasattr(tokenizer, "_decode")
        self._direct = _plain_fast_encoding(tokenizer)
        self._batch_decode = self._direct and _plain_fast_decoding(tokenizer)
        self._segments: SegmentedEncoder | None = None
        self._pieces: dict[int, str] = {}
        self.marked: dict[tuple[str, ...], dict[str, str]] = {}  # control tokens -> {text: marked text}
        self._added: dict[str, int] | None = None
        self._added_re: Any = None
        self._specials: frozenset[str] | None = None
        self._special_marks = BoundedCache(16384)
        self._tool_mentions = BoundedCache(256)
        self._mentions = BoundedCache(16384)
        self._vocab: dict[str, int] | None = None
        self.markers = control_markers()
        self.memo: dict[Any, Any] = {}  # other per-tokenizer facts (token splits...)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer()

    def encode(
        self, text: str, add_special_tokens: bool = False, split_special_tokens: bool | None = None
    ) -> list[int]:
        key = (text, add_special_tokens, split_special_tokens)
        hit = self._encodes.get(key)
        if hit is None:
            backend = self._backend(split_special_tokens)
            segmented = None if add_special_tokens else self._segmented(backend, text)
            if segmented is not None:
                ids = segmented.ids(text)
            elif backend is not None:
                ids = list(
                    backend.encode_batch([text], add_special_tokens=add_special_tokens, is_pretokenized=False)[0].ids
                )
            else:
                extra = {} if split_special_tokens is None else {"split_special_tokens": split_special_tokens}
                ids = list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens, **extra))
            hit = self._encodes.put(key, ids, len(text) + len(ids))
        return list(hit)

    def _backend(self, split_special_tokens: bool | None) -> Any:
        """The Rust tokenizer, when calling it directly does exactly what transformers' encode would: the same
        ``encode_batch`` call, minus the per-call Python around it (truncation and padding off, the same
        special-token splitting). None otherwise: then transformers does it."""
        if not self._direct:
            return None
        tok = self.tokenizer
        backend = tok._tokenizer
        split = tok.split_special_tokens if split_special_tokens is None else split_special_tokens
        if backend.truncation is not None or backend.padding is not None or backend.encode_special_tokens != split:
            return None
        return backend

    def _segmented(self, backend: Any, text: str) -> SegmentedEncoder | None:
        """The segment-cached encoder, for long texts that the plain backend call would encode
        (``add_special_tokens=False``, special tokens not split)."""
        if backend is None or len(text) < MIN_CHARS or backend.encode_special_tokens:
            return None
        if self._segments is None:
            self._segments = SegmentedEncoder(backend)
        return self._segments if self._segments.usable else None

    def encode_without_added_tokens(self, text: str) -> list[int]:
        """Plain text with no added token matched (how sanitized control-token text is encoded)."""
        key = (text, "without_added_tokens")
        hit = self._encodes.get(key)
        if hit is None:
            ids = list(self.tokenizer._encode_without_added_tokens(text))
            hit = self._encodes.put(key, ids, len(text) + len(ids))
        return list(hit)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        hit = self._offsets.get(text)
        if hit is None:
            backend = self._backend(None)
            segmented = self._segmented(backend, text)
            if segmented is not None:
                ids, offsets = segmented.encode(text)
            elif backend is not None:
                enc = backend.encode_batch([text], add_special_tokens=False, is_pretokenized=False)[0]
                ids, offsets = list(enc.ids), list(enc.offsets)  # already (start, end) tuples
            else:
                out = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
                ids, offsets = list(out["input_ids"]), [tuple(o) for o in out["offset_mapping"]]
            hit = self._offsets.put(text, (ids, offsets), len(text) + 3 * len(ids))
            self._encodes.put((text, False, None), ids, len(text) + len(ids))  # what encode(text) gives
        return list(hit[0]), list(hit[1])

    def encode_window(self, text: str, start: int, end: int) -> tuple[list[int], list[tuple[int, int]]]:
        """A run of ``encode_with_offsets(text)`` holding every token that overlaps ``[start, end]`` (the whole
        encoding unless the text is encoded by segments)."""
        segmented = self._segmented(self._backend(None), text)
        if segmented is not None:
            return segmented.window(text, start, end)
        return self.encode_with_offsets(text)

    def decode(self, ids: Sequence[int], **kwargs: Any) -> str:
        if len(ids) > _DECODE_CACHED:  # hashing the key would cost about what decoding does
            return self._decode(list(ids), kwargs)
        key = (tuple(ids), tuple(sorted(kwargs.items())))
        hit = self._decodes.get(key)
        if hit is None:
            hit = self._decodes.put(key, self._decode(list(ids), kwargs), 2 * len(ids))
        return str(hit)

    def decode_many(self, sequences: Sequence[Sequence[int]], **kwargs: Any) -> list[str]:
        """``[decode(ids, **kwargs) for ids in sequences]`` (not cached: for many one-off sequences). One call into
        the Rust tokenizer when transformers' own ``_decode`` would do exactly that (no cleanup to apply)."""
        if self._batch_decode and not kwargs.get("clean_up_tokenization_spaces", True) and sequences:
            extra = {k: v for k, v in kwargs.items() if k != "clean_up_tokenization_spaces"}
            if set(extra) <= {"skip_special_tokens"}:
                skip = bool(extra.get("skip_special_tokens", False))
                return list(
                    self.tokenizer._tokenizer.decode_batch([list(s) for s in sequences], skip_special_tokens=skip)
                )
        return [self._decode(list(s), kwargs) for s in sequences]

    def _decode(self, ids: list[int], kwargs: dict[str, Any]) -> str:
        """``tokenizer.decode(ids, **kwargs)`` for one sequence. For fast tokenizers that is ``_decode`` after a
        per-element type scan of the list (``to_py_obj``), which costs more than the decoding itself on long
        sequences; the backend takes any integer ids itself."""
        if self._fast_decode:
            extra = dict(kwargs)
            skip = bool(extra.pop("skip_special_tokens", False))
            return str(self.tokenizer._decode(token_ids=ids, skip_special_tokens=skip, **extra))
        return str(self.tokenizer.decode(ids, **kwargs))

    def piece(self, token_id: int) -> str:
        """One id decoded alone (what a token strip shows)."""
        hit = self._pieces.get(token_id)
        if hit is None:
            hit = self._pieces[token_id] = self.tokenizer.decode([token_id], clean_up_tokenization_spaces=False)
        return hit

    def mentions_added_tokens(self, obj: Any) -> bool:
        """Whether any string value in ``obj`` contains an added token's text (else sanitizing changes nothing).

        Control tokens are always added tokens, so one tokenizer-wide test spares building a template's
        control-token set for conversations that cannot contain one. Tuples count as a change (marking turns
        them into lists)."""
        if isinstance(obj, str):
            hit = self._mentions.get(obj)
            if hit is None:
                # markers are stripped by transformers, so text holding one changes when sanitized
                found = any(m in obj for m in self.markers) or self.added_re.search(obj) is not None
                hit = self._mentions.put(obj, found, len(obj))
            return hit
        if isinstance(obj, dict):
            return any(self.mentions_added_tokens(v) for v in obj.values())
        if isinstance(obj, list):
            return any(self.mentions_added_tokens(v) for v in obj)
        return isinstance(obj, tuple)

    def tools_mention_added_tokens(self, tools: Any) -> bool:
        """``mentions_added_tokens(tools)``, once per distinct tools list (one list serves a whole audit)."""
        if tools is None:
            return False
        key = repr(tools)
        hit = self._tool_mentions.get(key)
        if hit is None:
            hit = self._tool_mentions.put(key, self.mentions_added_tokens(tools), len(key))
        return bool(hit)

    @property
    def added_re(self) -> Any:
        """transformers' pattern for every added token (longest first), as ``encode_marked_chat`` builds it."""
        if self._added_re is None:
            from transformers.utils.chat_template_utils import _get_control_token_patterns

            self._added_re = _get_control_token_patterns(tuple(self.added_tokens_encoder))[0]
        return self._added_re

    def mark_specials(self, text: str) -> str | None:
        """``mark_control_tokens(text)`` for any template, when every added token in ``text`` is a special token
        (special tokens are control tokens for every template); None when one is not (the template decides).

        The tokenizer-wide pattern then finds exactly the matches a template's control-token pattern finds: at
        each position the longest added token that matches is special, hence also the longest control token."""
        hit = self._special_marks.get(text, False)
        if hit is False:
            from transformers.utils.chat_template_utils import mark_control_tokens

            if self._specials is None:
                decoder = self.tokenizer.added_tokens_decoder
                self._specials = frozenset(t.content for t in decoder.values() if t.special)
            plain = text
            for m in self.markers:
                plain = plain.replace(m, "")
            found = self.added_re.findall(plain)
            hit = mark_control_tokens(text, self.added_re) if set(found) <= self._specials else None
            self._special_marks.put(text, hit, len(text))
        return hit

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        if self._added is None:
            self._added = dict(self.tokenizer.added_tokens_encoder)
        return self._added

    @property
    def vocab(self) -> Mapping[str, int]:
        """``tokenizer.get_vocab()`` as a read-only mapping. Lookups go to the Rust tokenizer where that is the same
        thing (added tokens first, then the model's vocabulary), so the dict of 100k+ entries is built only if
        someone iterates it."""
        return _Vocab(self)

    def full_vocab(self) -> dict[str, int]:
        if self._vocab is None:
            self._vocab = dict(self.tokenizer.get_vocab())
        return self._vocab

    def token_id(self, token: str) -> int | None:
        if self._direct and self._vocab is None:
            tid = self.tokenizer._tokenizer.token_to_id(token)
            return None if tid is None else int(tid)
        return self.full_vocab().get(token)


class _Vocab(Mapping[str, int]):
    """A tokenizer's vocabulary, looked up one token at a time (see ``TokenizerCache.vocab``)."""

    def __init__(self, cache: TokenizerCache) -> None:
        self._cache = cache

    def __getitem__(self, token: str) -> int:
        tid = self._cache.token_id(token) if isinstance(token, str) else None
        if tid is None:
            raise KeyError(token)
        return tid

    def __iter__(self) -> Iterator[str]:
        return iter(self._cache.full_vocab())

    def __len__(self) -> int:
        return len(self._cache.full_vocab())


def _plain_fast_encoding(tokenizer: Any) -> bool:
    """A fast tokenizer whose encode and __call__ are transformers' own (no model-specific override)."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return False
    cls = type(tokenizer)
    return (
        isinstance(tokenizer, TokenizersBackend)
        and cls._encode_plus is TokenizersBackend._encode_plus
        and cls.encode is PreTrainedTokenizerBase.encode
        and cls.__call__ is PreTrainedTokenizerBase.__call__
        and hasattr(tokenizer, "_tokenizer")
    )


def _plain_fast_decoding(tokenizer: Any) -> bool:
    """transformers' own ``_decode``: the backend's decode, then only the optional space cleanup."""
    try:
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return False
    return type(tokenizer)._decode is TokenizersBackend._decode


_TOKENIZER_CACHES: weakref.WeakKeyDictionary[Any, TokenizerCache] = weakref.WeakKeyDictionary()


def tokenizer_cache(tokenizer: Any) -> TokenizerCache:
    """The cache of ``tokenizer`` (rebuilt when tokens were added to it since)."""
    try:
        cache = _TOKENIZER_CACHES.get(tokenizer)
    except TypeError:  # not weak-referenceable: no sharing
        return TokenizerCache(tokenizer)
    if cache is None or cache.size != len(tokenizer):
        cache = _TOKENIZER_CACHES[tokenizer] = TokenizerCache(tokenizer)
    return cache


class _EncodeView:
    """The tokenizer as transformers' ``encode_marked_chat`` uses it, with the added-token table and plain encodes
    served from the cache (recomputing the table costs milliseconds per call for large added vocabularies)."""

    def __init__(self, tokenizer: Any, cache: TokenizerCache) -> None:
        self._tokenizer = tokenizer
        self._cache = cache
        self.added_tokens_encoder = cache.added_tokens_encoder

    def encode(self, text: str, add_special_tokens: bool = True, split_special_tokens: bool | None = None) -> list[int]:
        return self._cache.encode(text, add_special_tokens, split_special_tokens)

    def _encode_without_added_tokens(self, text: str) -> list[int]:
        return self._cache.encode_without_added_tokens(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


class _Sanitizer:
    """``sanitize_control_tokens=True`` for one (tokenizer, template): which strings to mark, and how to encode.

    The template's own control-token set (special tokens plus the added tokens its text contains) is built only
    for a string that holds a non-special added token; strings with special tokens only are marked tokenizer-wide.
    """

    def __init__(self, tokenizer: Any, chat_template: str, cache: TokenizerCache) -> None:
        from transformers.utils import chat_template_utils as ctu

        self._ctu = ctu
        self._tokenizer, self._template, self._cache = tokenizer, chat_template, cache
        self._own: tuple[Any, dict[str, str]] | None = None
        self.view = _EncodeView(tokenizer, cache)

    def _own_pattern(self) -> tuple[Any, dict[str, str]]:
        if self._own is None:
            controls = tuple(self._tokenizer._get_control_tokens(self._template))
            pattern, _ = self._ctu._get_control_token_patterns(controls)
            self._own = (pattern, self._cache.marked.setdefault(controls, {}))
        return self._own

    def mark(self, obj: Any) -> Any:
        """``mark_control_tokens(obj)``, with each string marked once."""
        if isinstance(obj, str):
            hit = self._cache.mark_specials(obj)
            if hit is None:
                pattern, memo = self._own_pattern()
                hit = memo.get(obj)
                if hit is None:
                    hit = memo[obj] = self._ctu.mark_control_tokens(obj, pattern)
            return hit
        if isinstance(obj, dict):
            return {key: self.mark(value) for key, value in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.mark(value) for value in obj]
        return obj

    def encode(self, text: str) -> list[int]:
        return list(self._ctu.encode_marked_chat(self.view, text))


def _sanitizer(tokenizer: Any, chat_template: str, cache: TokenizerCache) -> _Sanitizer | None:
    """None where this transformers or tokenizer lacks the pieces (then apply_chat_template does it all)."""
    try:
        if not hasattr(tokenizer, "_get_control_tokens") or not hasattr(tokenizer, "_encode_without_added_tokens"):
            return None
        return _Sanitizer(tokenizer, chat_template, cache)
    except (ImportError, AttributeError, TypeError):
        return None


class _Shared:
    """What every renderer derived from one ``Renderer(...)`` shares: render caches, derived renderers, sanitizer."""

    def __init__(self, tokenizer: Any, chat_template: str) -> None:
        self.cache = tokenizer_cache(tokenizer)
        self.texts: dict[str, str | RenderError] = {}
        self.ids: dict[str, list[int] | RenderError] = {}
        self.derived: dict[str, Renderer] = {}
        self._sanitizer: _Sanitizer | None = None
        self._sanitizer_tried = False
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self._reads_tools: bool | None = None

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
    def sanitizer(self) -> _Sanitizer | None:
        if not self._sanitizer_tried:
            self._sanitizer_tried = True
            self._sanitizer = _sanitizer(self.tokenizer, self.chat_template, self.cache)
        return self._sanitizer


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
    ) -> None:
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.template_kwargs = dict(template_kwargs or {})
        self.date = date
        self.limits = limits or RenderLimits()
        if _shared is None:
            _install_pinned_clock(chat_template)
            _shared = _Shared(tokenizer, chat_template)
        self._shared = _shared

    def _derive(self, template_kwargs: dict[str, Any], date: dt.datetime) -> Renderer:
        key = json.dumps([template_kwargs, date.isoformat()], sort_keys=True, default=repr)
        hit = self._shared.derived.get(key)
        if hit is None:
            hit = Renderer(self.tokenizer, self.chat_template, template_kwargs, date, self.limits, self._shared)
            self._shared.derived[key] = hit
        return hit

    def with_kwargs(self, **template_kwargs: Any) -> Renderer:
        return self._derive({**self.template_kwargs, **template_kwargs}, self.date)

    def with_date(self, date: dt.datetime) -> Renderer:
        return self._derive(self.template_kwargs, date)

    def _guarded(self, run: Any, template_code: bool = True) -> Any:
        """``run()`` under the pinned date and the render limits; every failure becomes a classified RenderError.

        ``template_code=False`` is for encoding text a guarded render already produced: no template code runs,
        so the time and memory budgets (set per call, at a cost) are left out; the size bound still applies."""
        try:
            with pinned_date(self.date), render_limits(self.limits) if template_code else nullcontext():
                out = run()
        except RenderTimeout as exc:
            raise RenderError("timeout", str(exc)) from exc
        except SecurityError as exc:
            raise RenderError("security", f"sandbox refused: {first_line(exc)}") from exc
        except TemplateError as exc:
            raise RenderError("raised", first_line(exc)) from exc
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError) as exc:
            raise RenderError("type", f"{type(exc).__name__}: {first_line(exc)}") from exc
        except MemoryError as exc:
            raise RenderError("too_large", "render exhausted its memory budget") from exc
        except OverflowError as exc:  # the sandbox's MAX_RANGE, or arithmetic past any sane size
            raise RenderError("too_large", f"OverflowError: {first_line(exc)}") from exc
        except RecursionError as exc:
            raise RenderError("too_large", "render recursed too deeply") from exc
        except Exception as exc:
            raise RenderError("crash", f"{type(exc).__name__}: {first_line(exc)}") from exc
        size = len(out) if isinstance(out, str | list) else len(out.get("input_ids", out)) if hasattr(out, "get") else 0
        if size > self.limits.max_chars:
            raise RenderError("too_large", f"render produced {size:,} characters (limit {self.limits.max_chars:,})")
        return out

    def _apply(self, messages: Any, tools: Any, agp: bool, kwargs: dict[str, Any], **extra: Any) -> Any:
        return self.tokenizer.apply_chat_template(
            list(messages), tools=tools, chat_template=self.chat_template, add_generation_prompt=agp, **extra, **kwargs
        )

    def render(self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False) -> str:
        """Rendered text; raises RenderError (cached, so a failing render is not retried)."""
        if tools is not None and not self._shared.reads_tools:
            tools = None
        key = _key(messages, tools, add_generation_prompt, self.template_kwargs, self.date)
        return self._render(key, messages, tools, add_generation_prompt)

    def _render(self, key: str, messages: Sequence[Message], tools: Any, add_generation_prompt: bool) -> str:
        texts = self._shared.texts
        hit = texts.get(key)
        if hit is None:
            try:
                hit = self._guarded(
                    lambda: self._apply(messages, tools, add_generation_prompt, self.template_kwargs, tokenize=False)
                )
            except RenderError as err:
                hit = err
            texts[key] = hit
        if isinstance(hit, RenderError):
            raise hit
        return hit

    def render_ids(
        self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """Token ids of a render with control-token text in message content encoded as plain text.

        This is how environment messages must be encoded: a tool result that contains ``<|im_end|>`` must not
        become the control token. Falls back to plain encoding where the tokenizer cannot sanitize.
        """
        if tools is not None and not self._shared.reads_tools:
            tools = None
        key = _key(messages, tools, add_generation_prompt, self.template_kwargs, self.date)
        cache = self._shared.ids
        hit = cache.get(key)
        if hit is None:
            try:
                try:
                    out = self._sanitized(key, messages, tools, add_generation_prompt)
                except RenderError as err:
                    if err.kind not in ("type", "crash"):
                        raise
                    out = self.encode(self.render(messages, tools, add_generation_prompt))
                hit = list(out)
            except RenderError as err:
                hit = err
            cache[key] = hit
        if isinstance(hit, RenderError):
            raise hit
        return list(hit)

    def sanitized_ids(
        self, messages: Sequence[Message], tools: Any = None, add_generation_prompt: bool = False
    ) -> list[int]:
        """``render_ids`` without its fallback: raises RenderError when the render cannot be sanitized (for a check
        that compares sanitized with plain ids, a silent plain fallback would compare plain with plain)."""
        if tools is not None and not self._shared.reads_tools:
            tools = None
        key = _key(messages, tools, add_generation_prompt, self.template_kwargs, self.date)
        return self._sanitized(key, messages, tools, add_generation_prompt)

    def _sanitized(self, key: str, messages: Sequence[Message], tools: Any, agp: bool) -> list[int]:
        """``apply_chat_template(tokenize=True, sanitize_control_tokens=True)``, without redundant work."""
        markers = self._shared.cache.markers
        if not getattr(self.tokenizer, "is_fast", False) or markers == ():
            return self._apply_sanitized(messages, tools, agp)
        cache = self._shared.cache
        if not (
            cache.mentions_added_tokens([list(messages), self.template_kwargs])
            or cache.tools_mention_added_tokens(tools)
        ):
            # Nothing to mark: the template sees exactly the plain inputs, and encode_marked_chat of text without
            # markers is the plain encoding.
            text = self._render(key, messages, tools, agp)  # the same key: render_ids' and render's agree
            if not any(m in text for m in markers):
                return list(self._guarded(lambda: self._shared.cache.encode(text), template_code=False))
        san = self._shared.sanitizer
        if san is None:
            return self._apply_sanitized(messages, tools, agp)
        msgs, marked_tools, kwargs = san.mark([list(messages), tools, self.template_kwargs])
        return list(self._guarded(lambda: san.encode(self._apply(msgs, marked_tools, agp, kwargs, tokenize=False))))

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

    def render_with_mask(self, messages: Sequence[Message], tools: Any = None) -> tuple[list[int], list[int]]:
        """Ids and ``assistant_masks`` (``return_assistant_tokens_mask=True``), under the same limits."""
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
