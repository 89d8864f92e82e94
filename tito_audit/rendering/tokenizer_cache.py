"""Pure functions of one tokenizer, computed once per tokenizer and shared by every renderer that uses it.

An audit encodes the same text hundreds of times, and a scan audits hundreds of templates against a few
tokenizers, so encodes, decodes, the added-token table and the vocabulary are cached per tokenizer object
(``tokenizer_cache``; rebuilt when tokens are added to it). Where calling the Rust tokenizer directly does
exactly what transformers' encode or decode would (a fast tokenizer with transformers' own methods), the cache
calls it directly, without the per-call Python around it; long texts are encoded by segments cut at control
tokens (``segments``), which consecutive prefixes of one conversation, and sibling templates in a scan, share.
Encodings are kept as tuples and handed out as lists: the garbage collector stops tracking a tuple of ints, but
walks a list of ints id by id at every collection of the old generation (with lists, collecting took about a
tenth of a scan's CPU time under ``perf``; with tuples, about a twentieth).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from typing import Any

from tito_audit import compat
from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.literal_pattern import any_of
from tito_audit.rendering.segments import SegmentedEncoder

_DECODE_CACHED = 256  # longer id sequences are decoded every time


@lru_cache(maxsize=1)
def control_markers() -> tuple[str, ...]:
    """The private-use characters ``sanitize_control_tokens`` wraps user control-token text in (none: no support).
    Asked for on first use, not at import: importing transformers costs most of a cold start. None where
    ``compat``'s ``control_token_marking`` is missing: then transformers marks and encodes every sanitized render."""
    marking = compat.pieces("control_token_marking")
    return () if marking is None else tuple(marking.markers)


class TokenizerCache:
    """Pure functions of one tokenizer, computed once: encodes, decodes, vocabulary, added and special tokens."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = weakref.ref(tokenizer)  # the cache must not keep its (weak) key alive
        self.size = len(tokenizer)
        self._encodes = BoundedCache()
        self._offsets = BoundedCache(512)
        self._decodes = BoundedCache()
        self._fast_decode = _plain_fast_decoding(tokenizer)
        self._direct = _plain_fast_encoding(tokenizer)
        self._batch_decode = self._direct and _plain_fast_decoding(tokenizer)
        self._segments: SegmentedEncoder | None = None
        self._pieces: dict[int, str] = {}
        self.marked: dict[tuple[str, ...], dict[str, str]] = {}  # control tokens -> {text: marked text}
        self._added: dict[str, int] | None = None
        self._added_re: Any = None
        self._specials: frozenset[str] | None = None
        self._special_texts: tuple[str, ...] | None = None
        self._special_marks = BoundedCache(16384)
        self._mentions = BoundedCache(16384)
        self._value_mentions = BoundedCache(16384)
        self._vocab: dict[str, int] | None = None
        self.markers = control_markers()
        self.memo: dict[Any, Any] = {}  # other per-tokenizer facts (token splits...)

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer()

    def prepare(self) -> None:
        """Build now what every audit on this tokenizer builds on first use: the added-token pattern (a regular
        expression over every added token), the special tokens' text and the segment encoder. A scan calls this
        before its workers fork, so that they share them instead of each building its own. (transformers' pattern
        over every added token is not built: sanitized encodes give it only the tokens a render holds between
        markers, ``sanitizer.EncodeView.for_text``.)"""
        _ = self.added_re, self.special_texts
        self._segmented(self._backend(None))

    def share_backend_parts(self, other: TokenizerCache) -> None:
        """Take ``other``'s parts that only the Rust backend decides (the added-token table and pattern, which
        strings mention an added token, the special tokens' text, the segment encoder and its cached segments),
        for a tokenizer that shares ``other``'s backend and differs only in Python-side attributes (a clone with
        another bos or eos: every synthesized template gets one). Without it each clone rebuilds them. Nothing
        else is shared: encodes with special tokens and special ids depend on the Python side."""
        mine = getattr(self.tokenizer, "backend_tokenizer", None)
        if mine is None or mine is not getattr(other.tokenizer, "backend_tokenizer", None) or self.size != other.size:
            return
        try:
            other.prepare()
        except Exception:  # a transformers without the pattern builder: this cache builds what it can itself
            return
        self._added, self._added_re = other.added_tokens_encoder, other._added_re
        self._mentions, self._value_mentions = other._mentions, other._value_mentions
        self._segments = other._segments
        self._special_texts = other.special_texts

    def encode(
        self, text: str, add_special_tokens: bool = False, split_special_tokens: bool | None = None
    ) -> list[int]:
        key = (text, add_special_tokens, split_special_tokens)
        hit = self._encodes.get(key)
        if hit is None:
            backend = self._backend(split_special_tokens)
            segmented = None if add_special_tokens else self._segmented(backend)
            if segmented is not None:
                ids = segmented.ids(text)
            elif backend is not None:  # the ids alone: without offsets where this version of tokenizers can
                batch = getattr(backend, "encode_batch_fast", backend.encode_batch)
                ids = list(batch([text], add_special_tokens=add_special_tokens, is_pretokenized=False)[0].ids)
            else:
                extra = {} if split_special_tokens is None else {"split_special_tokens": split_special_tokens}
                ids = list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens, **extra))
            hit = self._encodes.put(key, tuple(ids), len(text) + len(ids))
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

    def _segmented(self, backend: Any) -> SegmentedEncoder | None:
        """The segment-cached encoder, for what the plain backend call would encode (``add_special_tokens=False``,
        special tokens not split). Every text goes through it, short ones too: the Rust tokenizer's pre-tokenizing
        regular expression costs a few hundred nanoseconds per character, and most of a short render (a system
        prompt, a turn header) is a segment some earlier render already had (a callgrind count of the scan ran
        fewer instructions than with texts under 512 characters encoded whole)."""
        if backend is None or backend.encode_special_tokens:
            return None
        if self._segments is None:
            self._segments = SegmentedEncoder(backend)
        return self._segments if self._segments.usable else None

    def encode_without_added_tokens(self, text: str) -> list[int]:
        """Plain text with no added token matched (how sanitized control-token text is encoded)."""
        key = (text, "without_added_tokens")
        hit = self._encodes.get(key)
        if hit is None:
            ids = tuple(self.tokenizer._encode_without_added_tokens(text))
            hit = self._encodes.put(key, ids, len(text) + len(ids))
        return list(hit)

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        hit = self._offsets.get(text)
        if hit is None:
            backend = self._backend(None)
            segmented = self._segmented(backend)
            if segmented is not None:
                ids, offsets = segmented.encode(text)
            elif backend is not None:
                enc = backend.encode_batch([text], add_special_tokens=False, is_pretokenized=False)[0]
                ids, offsets = list(enc.ids), list(enc.offsets)  # already (start, end) tuples
            else:
                out = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
                ids, offsets = list(out["input_ids"]), [tuple(o) for o in out["offset_mapping"]]
            hit = self._offsets.put(text, (tuple(ids), tuple(offsets)), len(text) + 3 * len(ids))
            self._encodes.put((text, False, None), hit[0], len(text) + len(ids))  # what encode(text) gives
        return list(hit[0]), list(hit[1])

    def encode_window(self, text: str, start: int, end: int) -> tuple[list[int], list[tuple[int, int]]]:
        """A run of ``encode_with_offsets(text)`` holding every token that overlaps ``[start, end]`` (the whole
        encoding unless the text is encoded by segments)."""
        segmented = self._segmented(self._backend(None))
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

    def any_mentions_added_tokens(self, values: Iterable[Any]) -> bool:
        """``mentions_added_tokens(list(values))``, with each value's answer kept by its content
        (``BoundedCache.by_content``): an audit asks about each message of a conversation again with every longer
        prefix, and about one tools list for a whole scenario."""
        return any(self._value_mentions.by_content(value, self.mentions_added_tokens) for value in values)

    @property
    def added_re(self) -> Any:
        """A pattern for every added token that matches what transformers' (``_get_control_token_patterns``, as
        ``encode_marked_chat`` builds it) matches, as a trie (``literal_pattern``): searched on every string an
        audit renders, over hundreds of tokens."""
        if self._added_re is None:
            self._added_re = any_of(self.added_tokens_encoder)
        return self._added_re

    def mark_specials(self, text: str) -> str | None:
        """``mark_control_tokens(text)`` for any template, when every added token in ``text`` is a special token
        (special tokens are control tokens for every template); None when one is not (the template decides).

        The tokenizer-wide pattern then finds exactly the matches a template's control-token pattern finds: at
        each position the longest added token that matches is special, hence also the longest control token."""
        hit = self._special_marks.get(text, False)
        if hit is False:
            mark_control_tokens = compat.pieces("control_token_marking").mark
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
    def special_texts(self) -> tuple[str, ...]:
        """Text of the special added tokens, longest first (ties by text, so every run agrees; some tokenizers
        have thousands)."""
        if self._special_texts is None:
            decoder = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
            texts = {t.content for t in decoder.values() if getattr(t, "special", False) and t.content.strip()}
            self._special_texts = tuple(sorted(texts, key=lambda t: (-len(t), t)))
        return self._special_texts

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
    """A fast tokenizer whose encode and __call__ are transformers' own (no model-specific override); False where
    ``compat``'s ``direct_tokenizer`` is missing (then transformers encodes)."""
    direct = compat.pieces("direct_tokenizer")
    if direct is None:
        return False
    cls = type(tokenizer)
    return (
        isinstance(tokenizer, direct.backend_class)
        and getattr(cls, "_encode_plus", None) is direct.encode_plus
        and cls.encode is direct.base.encode
        and cls.__call__ is direct.base.__call__
        and hasattr(tokenizer, "_tokenizer")
    )


def _plain_fast_decoding(tokenizer: Any) -> bool:
    """transformers' own ``_decode``: the backend's decode, then only the optional space cleanup (False where
    ``compat``'s ``direct_tokenizer`` is missing: then the tokenizer's public ``decode``)."""
    direct = compat.pieces("direct_tokenizer")
    return direct is not None and getattr(type(tokenizer), "_decode", None) is direct.decode


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
