"""A memo that cannot grow without bound: a scan feeds one tokenizer hundreds of templates, and renders can be
long, so every per-tokenizer cache forgets its oldest entries past an entry count or a total weight.

Memos of messages and tools are keyed by their content (``content_key``): an audit asks about each message of a
conversation again with every longer prefix, in new lists and copies, so identity cannot key them.

Why not a library (``python benchmarks/bench_hand_written.py``, ``benchmarks/results/hand-written.json``): a hit
is a plain ``dict.get``, 91 ns against 141 ns for ``functools.lru_cache`` (which bounds entries, never their
weight) and 283 to 430 ns for cachetools' FIFO and LRU caches (which bound weight through ``getsizeof``). The cost
of dropping the oldest quarter: on a stream that overflows the bound it kept 71% hits where an LRU kept 83%.
"""

from __future__ import annotations

import marshal
from collections.abc import Callable
from typing import Any

CACHE_ENTRIES = 4096  # per tokenizer and kind


class BoundedCache(dict[Any, Any]):
    """A dict that forgets its oldest quarter past ``limit`` entries or ``budget`` weight (characters plus ids
    held, as the caller counts them)."""

    def __init__(self, limit: int = CACHE_ENTRIES, budget: int = 4_000_000) -> None:
        super().__init__()
        self.limit, self.budget, self.weight = limit, budget, 0
        self._weights: dict[Any, int] = {}

    def put(self, key: Any, value: Any, weight: int = 1) -> Any:
        if key not in self:
            if len(self) >= self.limit or self.weight + weight > self.budget:
                for old in list(self)[: max(1, len(self) // 4)]:
                    del self[old]
                    self.weight -= self._weights.pop(old, 0)
            self.weight += weight
            self._weights[key] = weight
        self[key] = value
        return value

    def by_content(self, value: Any, compute: Callable[[Any], Any], weigh: Callable[[Any], int] | None = None) -> Any:
        """``compute(value)``, kept under ``content_key(value)``; computed every time for a value without one.
        Each entry weighs its key's length, plus ``weigh(result)`` for results whose size matters."""
        key = content_key(value)
        if key is None:
            return compute(value)
        hit = self.get(key)
        if hit is None:
            hit = compute(value)
            self.put(key, hit, len(key) + (weigh(hit) if weigh is not None else 0))
        return hit


def content_key(value: Any) -> bytes | None:
    """Every value in ``value`` with its exact type, as bytes: ``marshal`` format 2, which writes no back-references
    and no interning marks, so equal content gives equal bytes, and True, 1 and 1.0, or a tuple and a list, stay
    apart; a few times cheaper than ``repr``. None where marshal cannot write it (other types, subclasses, cycles)."""
    try:
        return marshal.dumps(value, 2)
    except ValueError:
        return None
