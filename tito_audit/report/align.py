"""Aligning two id sequences: difflib's matching blocks, found without difflib's quadratic search.

Used to count the trainable tokens a divergence costs (``count_unmatched_trainable``) and by ``replay.compare``.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

_NUMPY_CELLS = 40_000  # ranges at least this large (len(a) * len(b)) are searched with numpy
_HASH_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64


class IdMatcher(difflib.SequenceMatcher[int]):
    """``SequenceMatcher(autojunk=False)`` over id lists: the same blocks, found without difflib's quadratic search.

    difflib's longest-match search costs one dict operation per pair of equal ids, quadratic on long renders full of
    repeated ids (newlines, digits). Here the length of the longest common run is found by rolling hashes over
    numpy arrays (does a common window of length k exist? galloping up from the common prefix or suffix, which
    already is one), and the block returned is the one difflib returns: longest, then earliest in ``a``, then
    earliest in ``b``. Every hash hit is checked on the ids themselves, so a collision cannot change the answer.
    Junk handling, and small ranges, are difflib's own.
    """

    def __init__(self, a: Sequence[int], b: Sequence[int]) -> None:
        self._ids = (list(a), list(b))
        super().__init__(None, self._ids[0], self._ids[1], autojunk=False)
        self._arrays: tuple[Any, Any] | None = None

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        ahi = len(self._ids[0]) if ahi is None else ahi
        bhi = len(self._ids[1]) if bhi is None else bhi
        junk = getattr(self, "bjunk", None) or getattr(self, "bpopular", None)
        if junk or (ahi - alo) * (bhi - blo) < _NUMPY_CELLS or ahi <= alo or bhi <= blo:
            return super().find_longest_match(alo, ahi, blo, bhi)
        import numpy as np

        if self._arrays is None:
            self._arrays = (np.asarray(self._ids[0], dtype=np.uint64), np.asarray(self._ids[1], dtype=np.uint64))
        a, b = self._arrays[0][alo:ahi], self._arrays[1][blo:bhi]
        n = min(len(a), len(b))
        same = np.flatnonzero(a[:n] != b[:n])
        prefix = int(same[0]) if same.size else n
        tail = np.flatnonzero(a[len(a) - n :][::-1] != b[len(b) - n :][::-1])
        suffix = int(tail[0]) if tail.size else n
        windows = _Windows(np, a, b)
        best = max(prefix, suffix)  # a common run of this length exists
        if best < n and windows.first(best + 1) is not None:  # gallop, then bisect, to the longest length
            lo, step = best + 1, 1
            while lo + step <= n and windows.first(lo + step) is not None:
                lo, step = lo + step, step * 2
            hi = min(n + 1, lo + step)  # a run of length lo exists, of length hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if windows.first(mid) is not None else (lo, mid)
            best = lo
        if best == 0:
            return difflib.Match(alo, blo, 0)
        hit = windows.first(best)
        assert hit is not None
        return difflib.Match(alo + hit[0], blo + hit[1], best)


class _Windows:
    """Rolling hashes of every window of one length in two id arrays (arithmetic wraps modulo 2**64)."""

    def __init__(self, np: Any, a: Any, b: Any) -> None:
        self.np, self.a, self.b = np, a, b
        size = max(len(a), len(b)) + 1
        with np.errstate(over="ignore"):
            base = np.full(size, _HASH_BASE, dtype=np.uint64)
            base[0] = 1
            self.powers = np.cumprod(base, dtype=np.uint64)
            inverse = np.full(size, pow(_HASH_BASE, -1, 2**64), dtype=np.uint64)
            inverse[0] = 1
            self.inverses = np.cumprod(inverse, dtype=np.uint64)
            self.sums = (self._prefix_sums(a), self._prefix_sums(b))

    def _prefix_sums(self, x: Any) -> Any:
        np = self.np
        out = np.zeros(len(x) + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.cumsum((x + np.uint64(1)) * self.powers[: len(x)], dtype=np.uint64, out=out[1:])
        return out

    def _hashes(self, which: int, k: int) -> Any:
        sums = self.sums[which]
        count = len(sums) - k
        with self.np.errstate(over="ignore"):
            return (sums[k:] - sums[:count]) * self.inverses[:count]

    def first(self, k: int) -> tuple[int, int] | None:
        """The common window of length ``k`` that starts earliest in ``a``, then in ``b``; None if there is none."""
        np = self.np
        if k <= 0 or k > len(self.a) or k > len(self.b):
            return None
        ha, hb = self._hashes(0, k), self._hashes(1, k)
        for i in np.flatnonzero(np.isin(ha, hb)):
            window = self.a[i : i + k]
            for j in np.flatnonzero(hb == ha[i]):
                if np.array_equal(window, self.b[j : j + k]):
                    return int(i), int(j)
        return None


def count_unmatched_trainable(expected: Sequence[int], actual: Sequence[int], trainable: Sequence[int]) -> int:
    """Trainable positions of ``expected`` that an alignment with ``actual`` cannot match."""
    matcher = IdMatcher(expected, actual)
    matched = [False] * len(expected)
    for block in matcher.get_matching_blocks():
        for i in range(block.a, block.a + block.size):
            matched[i] = True
    return sum(1 for i, t in enumerate(trainable) if t and i < len(matched) and not matched[i])
