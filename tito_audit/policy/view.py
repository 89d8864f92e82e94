"""A view of one episode as a trainer sees it: ids, loss mask and each assistant turn's trained span.

``tito-audit rl`` builds two views of each episode (B: the token buffer; R: re-rendered and re-encoded) and
``replay --weights`` one per logged trainer sequence; the policy pieces compute log-probs and gradients over a
``View``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class View:
    """Ids, loss mask and where each assistant turn's trained span lies (``turns[k]`` is turn k).

    Without explicit ``turns`` the runs of the mask are the turns (true of a buffer: sampled ids are
    contiguous and every turn is followed by untrained ids).
    """

    ids: list[int]
    mask: list[int]
    turns: list[tuple[int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.turns:
            self.turns = mask_runs(self.mask)

    @property
    def n_trained(self) -> int:
        return sum(self.mask)


def mask_runs(mask: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    start = None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs
