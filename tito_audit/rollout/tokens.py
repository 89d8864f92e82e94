"""Small helpers on id sequences shared by the buffer, the simulator and the checks."""

from __future__ import annotations

from collections.abc import Sequence


def common_prefix_len(a: Sequence[object], b: Sequence[object]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def special_token_strings(tokenizer: object) -> list[str]:
    """Text of the tokenizer's special added tokens, longest first (ties by text, so every run agrees)."""
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    texts = {t.content for t in decoder.values() if getattr(t, "special", False) and t.content.strip()}
    return sorted(texts, key=lambda t: (-len(t), t))
