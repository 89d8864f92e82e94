"""Small helpers on id sequences shared by the buffer, the simulator and the checks."""

from __future__ import annotations

import math
import operator
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from tito_audit.rendering.tokenizer_cache import tokenizer_cache

LOGPROB_ROUNDING = 1e-4  # a log-prob above 0 by less than this is the engine's float rounding of log(1)


def token_ids(values: Any, what: str = "sampled ids", compared: bool = False) -> list[int]:
    """Token ids as an engine returns them or a log holds them (a list, a tuple, a numpy array or tensor), as ints;
    ``ValueError`` naming ``what`` for one that is no id: a bool, a float with a fraction, a negative, a string.
    A float without a fraction reads as its integer (JSON writers give ``5.0``); an integer of numpy's as its int.
    Never truncated: ``int(9707.7)`` would put another token in the buffer than the one sampled. The one check of
    ids for the buffer (``sampled_ids``), the replay reader and the trainer guard (``replay.schema``), so that
    what one accepts the others do. ``compared``: ids only ever compared with checked ones (an engine's prompts),
    where ``true`` would equal 1 anyway: the bool check, a second pass, is skipped. A plain list of ints comes back
    as it is."""
    if isinstance(values, (str, bytes)) or not (hasattr(values, "tolist") or isinstance(values, Sequence)):
        raise ValueError(f"{what} must be a list of token ids")
    if hasattr(values, "tolist"):
        values = values.tolist()
    if type(values) is list and _unsigned(values) and (compared or bool not in set(map(type, values))):
        return values  # what engines and JSON give: checked in C, no per-id Python step
    out: list[int] = []
    for v in values:
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool):
            raise ValueError(f"{what} must hold integers (found bool {v})")
        try:
            i = operator.index(v)
        except TypeError:
            raise ValueError(f"{what} must hold integers (found {type(v).__name__} {v!r:.40})") from None
        if i < 0:
            raise ValueError(f"{what} holds a negative id {i}")
        out.append(i)
    return out


def sampled_ids(ids: Any) -> list[int]:
    """``token_ids`` of what an engine sampled, as a list of its own (the buffer keeps it)."""
    return list(token_ids(ids))


def _unsigned(values: list[Any]) -> bool:
    """Whether every value is an int >= 0 (a bool too: the caller looks for those), tested by packing them in C."""
    try:
        array("Q", values)
    except (TypeError, OverflowError):
        return False
    return True


def log_probs(values: Any, what: str = "logprobs") -> list[float]:
    """Log-probs of sampled ids as floats; ``ValueError`` naming ``what`` for one that no engine gives: NaN,
    infinite, or above 0 by more than float rounding (a probability is at most 1), or no number. The log-prob mass
    of a divergence would read NaN or positive. The one check for the buffer and the replay reader alike."""
    if isinstance(values, (str, bytes)) or not (hasattr(values, "tolist") or isinstance(values, Sequence)):
        raise ValueError(f"{what} must be a list of numbers")
    if hasattr(values, "tolist"):
        values = values.tolist()
    try:
        out = array("d", values).tolist() if type(values) is list else [float(v) for v in values]
    except (TypeError, ValueError, OverflowError):
        try:
            out = [float(v) for v in values]  # what array refuses but float reads: a numpy scalar, a Decimal
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{what} must hold numbers") from None
    # two C-level passes: the sum is NaN or infinite when a value is, the max above 0 when one is
    if out and (not math.isfinite(sum(out)) or max(out) > LOGPROB_ROUNDING):
        found = next(((k, v) for k, v in enumerate(out) if not (math.isfinite(v) and v <= LOGPROB_ROUNDING)), None)
        if found is not None:  # (None: finite values whose sum overflowed)
            raise ValueError(f"{what}[{found[0]}] is {found[1]!r}: a log-prob is finite and at most 0")
    return out


def sampled_logprobs(logprobs: Any) -> list[float]:
    """``log_probs`` of what an engine sampled."""
    return log_probs(logprobs)


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


def first_of(ids: Sequence[int], wanted: Iterable[int]) -> int | None:
    """The first position of any of ``wanted`` (a few ids: stop tokens) in ``ids``, or None: one C-level search per
    wanted id, not a Python step per id of a long turn."""
    found = []
    for w in wanted:
        try:
            found.append(ids.index(w))
        except ValueError:
            pass
    return min(found) if found else None


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
