"""``rendering.literal_pattern.any_of``: the trie finds exactly what the longest-first alternation finds."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tito_audit.rendering.literal_pattern import any_of

ALPHABET = "<|>_ab\n .[]"
words = st.lists(st.text(ALPHABET, min_size=1, max_size=6), min_size=0, max_size=12)
texts = st.text(ALPHABET, max_size=60)


def alternation(tokens: list[str]) -> re.Pattern[str]:
    """transformers' ``_get_control_token_patterns`` (its first pattern)."""
    return re.compile("|".join(map(re.escape, sorted(tokens, key=len, reverse=True))) or "(?!)")


@settings(max_examples=400, deadline=None)
@given(words, texts)
def test_the_trie_matches_as_the_longest_first_alternation(tokens: list[str], text: str) -> None:
    trie, plain = any_of(tokens), alternation(tokens)
    assert [m.span() for m in trie.finditer(text)] == [m.span() for m in plain.finditer(text)]
    assert trie.sub("[\\g<0>]", text) == plain.sub("[\\g<0>]", text)


def test_real_control_tokens_and_edge_cases() -> None:
    tokens = ["<|im_start|>", "<|im_end|>", "<|im", "<|endoftext|>", "[INST]", "[/INST]", "<s>", "</s>"]
    text = "<s>[INST] hi [/INST] <|im_start|>user <|im <|im_end|><|endoftext|></s>"
    assert any_of(tokens).findall(text) == alternation(tokens).findall(text)
    assert any_of([]).search("anything") is None and any_of([""]).search("x") is None
    long = "x" * 300  # past the trie's depth bound: the plain alternation, the same matches
    assert any_of([long, "xx"]).findall("x" * 301) == [long]
