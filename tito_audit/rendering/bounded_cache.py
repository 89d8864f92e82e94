"""A memo that cannot grow without bound: a scan feeds one tokenizer hundreds of templates, and renders can be
long, so every per-tokenizer cache forgets its oldest entries past an entry count or a total weight."""

from __future__ import annotations

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
