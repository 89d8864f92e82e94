"""``sanitize_control_tokens=True`` reproduced from transformers' own pieces, without redundant work.

transformers' ``apply_chat_template(tokenize=True, sanitize_control_tokens=True)`` marks control-token text in
message content (so that a tool result holding ``<|im_end|>`` is encoded as plain text), renders, and encodes
the marked render. It recomputes the template's control tokens and re-marks every string on each call; here
control tokens are found once per (tokenizer, template) and each string is marked once. The pieces used
(``mark_control_tokens``, ``encode_marked_chat``, ``_get_control_token_patterns``, the tokenizer's
``_get_control_tokens`` and ``_encode_without_added_tokens``) are transformers' private APIs (``compat``'s
``control_token_marking``): where they are missing, ``sanitizer_for`` returns None and transformers does it all.
``tests/rendering/test_renderer_caches.py`` holds the result to transformers'.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tito_audit import compat
from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.literal_pattern import any_of
from tito_audit.rendering.tokenizer_cache import TokenizerCache


class EncodeView:
    """The tokenizer as transformers' ``encode_marked_chat`` uses it, with the added-token table and plain encodes
    served from the cache (recomputing the table costs milliseconds per call for large added vocabularies)."""

    def __init__(self, tokenizer: Any, cache: TokenizerCache) -> None:
        self._tokenizer = tokenizer
        self._cache = cache
        self.added_tokens_encoder = cache.added_tokens_encoder
        self._marker_in_table: bool | None = None  # some added token holds a marker character (``for_text``)

    def encode(self, text: str, add_special_tokens: bool = True, split_special_tokens: bool | None = None) -> list[int]:
        return self._cache.encode(text, add_special_tokens, split_special_tokens)

    def _encode_without_added_tokens(self, text: str) -> list[int]:
        return self._cache.encode_without_added_tokens(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def for_text(self, text: str, markers: tuple[str, str]) -> EncodeView:
        """This view with ``added_tokens_encoder`` cut to the added tokens ``text`` holds between a start and an end
        marker, for ``encode_marked_chat(view, text)``: the same ids, without compiling a pattern over every
        added token.

        ``encode_marked_chat`` splits ``text`` on ``START(t1|t2|...)END|[START END]`` over every added token, a
        pattern it compiles (``_get_control_token_patterns``, an lru_cache of 128) once per added-token table: a
        scan's synthesized tokenizers have a table each, of over a thousand tokens, and compiling that pattern was
        a twentieth of the corpus scan's CPU. No added token holds a marker, so a token can match only as the
        whole text between a start marker and the next marker, where that marker is an end: the tokens of the
        table found there are all the pattern needs, and the split is the same. A table with a token that holds
        a marker is kept whole."""
        table = self.added_tokens_encoder
        if self._marker_in_table is None:
            self._marker_in_table = any(m in t for t in table for m in markers)
        if self._marker_in_table:
            return self
        found = _between(markers).findall(text) if markers[0] in text else []
        view = object.__new__(EncodeView)
        view.__dict__.update(self.__dict__)
        view.added_tokens_encoder = {t: table[t] for t in sorted(set(found)) if t in table}
        return view


def _between(markers: tuple[str, str]) -> re.Pattern[str]:
    """The text between a start marker and the next marker, where that is an end marker."""
    start, end = map(re.escape, markers)
    return re.compile(f"{start}([^{start}{end}]*){end}")  # re's own cache keeps it


class Sanitizer:
    """``sanitize_control_tokens=True`` for one (tokenizer, template): which strings to mark, and how to encode.

    The template's own control-token set (special tokens plus the added tokens its text contains) is built only
    for a string that holds a non-special added token; strings with special tokens only are marked tokenizer-wide.
    """

    def __init__(self, tokenizer: Any, chat_template: str, cache: TokenizerCache) -> None:
        marking = compat.pieces("control_token_marking")
        if marking is None:
            raise AttributeError("transformers' control-token marking is not available")
        self._marking = marking
        self._tokenizer, self._template, self._cache = tokenizer, chat_template, cache
        self._own: tuple[Any, dict[str, str]] | None = None
        self._marked_values = BoundedCache(4096)
        self.view = EncodeView(tokenizer, cache)

    def _own_pattern(self) -> tuple[Any, dict[str, str]]:
        """The template's control tokens and their pattern: transformers' (``_get_control_token_patterns``), built
        here as a trie that matches the same (``literal_pattern``). Asking transformers would put one pattern per
        template into its cache of 128, which also holds the pattern over every added token that
        ``encode_marked_chat`` asks for on each call: a scan would push that one out and compile it again and again."""
        if self._own is None:
            controls = control_tokens(self._tokenizer, self._template)
            pattern = any_of(controls) if all(controls) else self._marking.patterns(controls)[0]
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
                    hit = memo[obj] = self._marking.mark(obj, pattern)
            return hit
        if isinstance(obj, dict):
            return {key: self.mark(value) for key, value in obj.items()}
        if isinstance(obj, list | tuple):
            return [self.mark(value) for value in obj]
        return obj

    def mark_each(self, values: Sequence[Any]) -> list[Any]:
        """``[mark(v) for v in values]``, each value's marking kept by its content (``BoundedCache.by_content``): an
        audit marks each message of a conversation again with every longer prefix. The marked values are shared
        between calls, read-only: transformers renders a copy of what it is given."""
        return [self._marked_values.by_content(value, self.mark) for value in values]

    def encode(self, text: str) -> list[int]:
        """``encode_marked_chat(tokenizer, text)``, given the added tokens that can matter to this ``text``
        (``EncodeView.for_text``)."""
        return list(self._marking.encode(self.view.for_text(text, self._marking.markers), text))


def control_tokens(tokenizer: Any, template: str) -> tuple[str, ...]:
    """``tokenizer._get_control_tokens(template)``: special tokens, and the added tokens found in the template's
    literal text. transformers parses the template once more for that text (``_get_template_literal_text``: its
    literals, joined with NUL so that a token cannot match across two); the literals come here from the parse
    ``analysis`` holds. A tokenizer that overrides the method, lists ``chat_control_tokens``, or has a token
    holding a NUL (whose match could depend on the order of the join) is asked itself.
    ``tests/rendering/test_template_analysis.py`` holds the two to the same tuple."""
    from tito_audit.rendering.analysis import template_facts

    marking = compat.pieces("control_token_marking")
    if marking is None:
        raise AttributeError("transformers' control-token marking is not available")
    if (
        type(tokenizer)._get_control_tokens is not marking.base._get_control_tokens
        or getattr(tokenizer, "chat_control_tokens", None) is not None
    ):
        return tuple(tokenizer._get_control_tokens(template))
    try:
        facts = template_facts(template).checked()
    except Exception:  # transformers raises as it would
        return tuple(tokenizer._get_control_tokens(template))
    added = list(tokenizer.added_tokens_decoder.values())
    if any("\0" in t.content for t in added):
        return tuple(tokenizer._get_control_tokens(template))
    text = "\0".join(dict.fromkeys(facts.literals))
    return tuple(t.content for t in added if t.special or (t.content in text and not t.content.isspace()))


def sanitizer_for(tokenizer: Any, chat_template: str, cache: TokenizerCache) -> Sanitizer | None:
    """None where this transformers or tokenizer lacks the pieces (then apply_chat_template does it all)."""
    try:
        if not compat.available("control_token_marking"):
            return None
        if not hasattr(tokenizer, "_get_control_tokens") or not hasattr(tokenizer, "_encode_without_added_tokens"):
            return None
        return Sanitizer(tokenizer, chat_template, cache)
    except (ImportError, AttributeError, TypeError):
        return None
