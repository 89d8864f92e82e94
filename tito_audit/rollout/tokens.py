"""Small helpers on id sequences shared by the buffer, the simulator and the checks."""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Sequence
from typing import Any

from tito_audit.rendering.tokenizer_cache import tokenizer_cache

LOGPROB_ROUNDING = 1e-4  # a log-prob above 0 by less than this is the engine's float rounding of log(1)


def sampled_ids(ids: Any) -> list[int]:
    """Token ids as an engine returns them (a list, a tuple, a numpy array or tensor), as ints; ``ValueError`` for
    one that is no id: a bool, a float with a fraction, a negative, a string. A float without a fraction reads as
    its integer, as in a log (``replay.schema``). Never truncated: ``int(9707.7)`` would put another token in the
    buffer than the one sampled."""
    values = ids.tolist() if hasattr(ids, "tolist") else ids
    if isinstance(values, (str, bytes)):
        raise ValueError("sampled ids must be a sequence of integers, not text")
    if type(values) is list and _unsigned(values) and bool not in set(map(type, values)):
        return list(values)  # what engines give: checked in C, no per-id Python step
    out: list[int] = []
    for v in values:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool):
            raise ValueError(f"sampled ids must be integers (found bool {v})")
        try:
            i = operator.index(v)
        except TypeError:
            raise ValueError(f"sampled ids must be integers (found {type(v).__name__} {v!r:.40})") from None
        if i < 0:
            raise ValueError(f"sampled ids must be >= 0 (found {i})")
        out.append(i)
    return out


def _unsigned(values: list[Any]) -> bool:
    """Whether every value is an int >= 0 (a bool too: the caller looks for those), tested by packing them in C."""
    try:
        array("Q", values)
    except (TypeError, OverflowError):
        return False
    return True


def sampled_logprobs(logprobs: Any) -> list[float]:
    """Log-probs of sampled ids as floats; ``ValueError`` for one that no engine gives: NaN, infinite, or above 0
    by more than float rounding (a probability is at most 1)."""
    values = logprobs.tolist() if hasattr(logprobs, "tolist") else logprobs
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError("log-probs must be numbers") from None
    if not out or (math.isfinite(sum(out)) and max(out) <= LOGPROB_ROUNDING):  # two C-level passes
        return out
    bad = next(((k, v) for k, v in enumerate(out) if not (math.isfinite(v) and v <= LOGPROB_ROUNDING)), None)
    if bad is not None:
        raise ValueError(f"logprobs[{bad[0]}] is {bad[1]!r}: a log-prob is finite and at most 0")
    return out


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
