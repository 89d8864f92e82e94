"""Small helpers on id sequences shared by the buffer, the simulator and the checks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tito_audit.rendering.tokenizer_cache import tokenizer_cache


def common_prefix_len(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Length of the longest common prefix. Same-typed lists, tuples and strings are compared by slices (in C,
    by bisection), which matters for the long renders and id lists an audit compares thousands of times."""
    n = min(len(a), len(b))
    if type(a) is not type(b) or not isinstance(a, list | tuple | str):
        for i in range(n):
            if a[i] != b[i]:
                return i
        return n
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def special_token_strings(tokenizer: Any) -> list[str]:
    """Text of the tokenizer's special added tokens, longest first (ties by text, so every run agrees); computed
    once per tokenizer (``TokenizerCache.special_texts``)."""
    return list(tokenizer_cache(tokenizer).special_texts)
