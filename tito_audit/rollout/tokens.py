"""Small helpers on id sequences shared by the buffer, the simulator and the checks."""

from __future__ import annotations

from array import array
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


def find_run(ids: Sequence[int], run: Sequence[int], start: int) -> int | None:
    """First position >= ``start`` where ``run`` sits in ``ids``. Hand-written: a byte search over the ids packed
    as 64-bit integers runs in C, where a Python loop over a long sequence costs one step per id."""
    if not run:
        return start if start <= len(ids) else None
    try:
        hay, needle = array("q", ids).tobytes(), array("q", run).tobytes()
    except OverflowError:
        return None
    at = hay.find(needle, start * 8)
    while at != -1 and at % 8:
        at = hay.find(needle, at + 1)
    return at // 8 if at != -1 else None
