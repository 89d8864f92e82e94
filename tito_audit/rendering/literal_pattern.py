"""A regular expression that finds any of many literal strings, leftmost-longest, as a trie.

Tokenizers add hundreds of tokens (a scan's synthesized bases thousands), and an audit searches every rendered
string for them. The obvious pattern, every token escaped and joined longest first, makes Python's regex engine
try each alternative in turn at every position where one could start. Written as a trie (``<|im_`` once, then
``start|>`` or ``end|>``), the engine follows one path per position, and the matches are the same: at each node
the longer continuations are tried first, so the match at a position is the longest token there, as with the
longest-first alternation. ``tests/rendering/test_literal_pattern.py`` holds the two to the same matches.

Why hand-written (``python benchmarks/bench_hand_written.py``, ``benchmarks/results/hand-written.json``, finding
every token in the 786 corpus templates): the alternation takes 4.8x the trie's time with one tokenizer's 26
added tokens and 11.5x with a synthesized base's 1,349; pyahocorasick (``iter_long``, the same matches) takes 9.2x
with 26 and 0.69x with 1,349, and gives the callers no ``re.Pattern`` (``search``, ``sub``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

_END = ""  # marks a node where a word ends (no character is the empty string)
_LONGEST = 200  # past this length a word nests the pattern (and the regex parser's recursion) too deep


def any_of(words: Iterable[str]) -> re.Pattern[str]:
    """``re.compile("|".join(map(re.escape, sorted(words, key=len, reverse=True))))``, matching the same. Kept per
    set of words: a tokenizer's added tokens are asked for by its cache and its segment encoder alike, and the
    control tokens of one template by every template of its family."""
    return _any_of(frozenset(w for w in words if w))


@lru_cache(maxsize=64)
def _any_of(words: frozenset[str]) -> re.Pattern[str]:
    if any(len(w) > _LONGEST for w in words):
        return re.compile("|".join(map(re.escape, sorted(words, key=len, reverse=True))) or "(?!)")
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[_END] = {}
    return re.compile(_pattern(trie) or "(?!)")  # (?!) never matches


def _pattern(node: dict[str, Any]) -> str:
    """The pattern below ``node`` (recursive: one level per character, words are at most ``_LONGEST`` long)."""
    branches = [re.escape(char) + _pattern(child) for char, child in sorted(node.items()) if char != _END]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if _END not in node:
        return body
    return f"(?:{body})?" if len(branches) > 1 or len(body) > 1 else f"{body}?"
