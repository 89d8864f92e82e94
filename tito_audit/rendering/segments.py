"""Encoding a render segment by segment, to exactly the ids and offsets of encoding it whole.

A Hugging Face ``tokenizers`` pipeline first cuts its input at the added tokens it matches on the raw text
(``normalized=False``), leftmost-longest, then normalizes, pre-tokenizes and tokenizes every piece between them
on its own. The one thing a piece learns about the rest is whether it starts at offset 0 (``Metaspace`` with
``prepend_scheme="first"``). So a text cut just before such a token, one that takes no text from its left
(``lstrip=False``), encodes to the concatenation of its segments' encodings, offsets shifted; ``single_word``
tokens look at their neighbours, so a tokenizer with any is always encoded whole.

An audit encodes every prefix of every conversation, and consecutive prefixes share all but their last
segments, as do the renders of sibling templates in a scan; each segment is encoded once per tokenizer instead
of once per render. ``tests/rendering/test_segments.py`` holds the result to the whole-text encoding on every shared and
bundled tokenizer.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.literal_pattern import any_of

Encoded = tuple[list[int], list[tuple[int, int]]]
# A segment's ids and offsets, or its ids alone (None: encoded without offsets, which costs the tokenizer less)
Cached = tuple[tuple[int, ...], tuple[tuple[int, int], ...] | None]


class SegmentedEncoder:
    """``backend.encode(text, add_special_tokens=False)`` for a ``tokenizers.Tokenizer`` that does not split
    special tokens, by cached segments."""

    def __init__(self, backend: Any) -> None:
        tokens = list(backend.get_added_tokens_decoder().values())
        raw = {t.content for t in tokens if not t.normalized and t.content}
        self._cuts = frozenset(t.content for t in tokens if not t.normalized and not t.lstrip and t.content)
        self._pattern = any_of(raw) if raw else None  # leftmost-longest, as the tokenizer matches them
        self.usable = bool(self._cuts) and not any(t.single_word for t in tokens)
        self._backend = backend
        # ``encode_batch`` without the offsets (tokenizers 0.20 and later): where only ids are asked for
        self._ids_only = getattr(backend, "encode_batch_fast", None)
        self._pieces = BoundedCache(16384, 3_000_000)  # characters plus three per token (ids and offsets)
        self._bounds = BoundedCache(4096, 2_000_000)  # text -> where ``segments`` cuts it, weighed by the text it holds

    def segments(self, text: str) -> list[str]:
        """``text`` cut before every raw, non-lstrip added token the tokenizer would match there."""
        bounds = self._bounds.get(text)
        if bounds is None:
            assert self._pattern is not None
            cuts = [m.start() for m in self._pattern.finditer(text) if m.start() and m.group() in self._cuts]
            # kept: an audit encodes a render's ids, then the window of its last turn (the same cuts)
            bounds = self._bounds.put(text, (0, *cuts, len(text)), len(text) + len(cuts))
        return [text[a:b] for a, b in pairwise(bounds)]

    def ids(self, text: str) -> list[int]:
        out: list[int] = []
        for ids, _offsets in self._encoded(self.segments(text), offsets=False):
            out += ids
        return out

    def encode(self, text: str) -> Encoded:
        return self.window(text, 0, len(text))

    def window(self, text: str, start: int, end: int) -> Encoded:
        """Ids and offsets of the segments that overlap ``[start, end]``: a run of the whole encoding that holds
        every token overlapping the span, without encoding the rest of a long render (only its length counts)."""
        wanted: list[tuple[str, int]] = []
        shift = 0
        for piece in self.segments(text):
            if shift <= end and shift + len(piece) >= start:
                wanted.append((piece, shift))
            shift += len(piece)
        all_ids: list[int] = []
        all_offsets: list[tuple[int, int]] = []
        for (_, shift), (ids, offsets) in zip(wanted, self._encoded([p for p, _ in wanted], offsets=True), strict=True):
            assert offsets is not None
            all_ids += ids
            all_offsets += [(a + shift, b + shift) for a, b in offsets]
        return all_ids, all_offsets

    def _encoded(self, pieces: list[str], offsets: bool) -> list[Cached]:
        """Each piece's encoding (with its offsets if ``offsets``); the pieces not cached yet (or cached without
        the offsets asked for) go to the tokenizer in one batch."""
        found: dict[str, Cached] = {}
        missing: list[str] = []
        for piece in pieces:
            if piece not in found:
                hit = self._pieces.get(piece)
                if hit is None or (offsets and hit[1] is None):
                    missing.append(piece)
                    hit = ((), ())
                found[piece] = hit
        if missing:
            keep_offsets = offsets or self._ids_only is None  # computed anyway where there is no ids-only call
            encode: Any = self._backend.encode_batch if keep_offsets else self._ids_only
            batch = encode(missing, add_special_tokens=False, is_pretokenized=False)
            for piece, enc in zip(missing, batch, strict=True):
                ids = tuple(enc.ids)
                entry = (ids, tuple(enc.offsets) if keep_offsets else None)
                found[piece] = self._pieces.put(piece, entry, len(piece) + 3 * len(ids))
        return [found[piece] for piece in pieces]
