"""A view of one episode as a trainer sees it: ids, loss mask and each assistant turn's trained span; and the two
helpers on spans that rl, replay and the guard share (``mask_runs``, ``turn_offsets``). Torch-free.

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
    """``(start, end)`` of every run of non-zero values. Hand-written: ``bytes.find`` jumps from run to run in C, so
    a long loss mask of few runs costs O(runs) Python steps instead of one per position (replay reads every
    episode's mask with it)."""
    try:  # a list of small ints converts in C; anything else (an array, a tensor) value by value
        b = bytes(mask) if isinstance(mask, list | tuple) else bytes(1 if m else 0 for m in mask)
    except (ValueError, TypeError):
        b = bytes(1 if m else 0 for m in mask)
    if b.translate(None, b"\x00\x01"):  # values other than 0 and 1: every non-zero one counts
        b = bytes(1 if m else 0 for m in b)
    runs = []
    pos = b.find(1)
    while pos != -1:
        end = b.find(0, pos)
        if end == -1:
            end = len(b)
        runs.append((pos, end))
        pos = b.find(1, end)
    return runs


def turn_offsets(turns: Sequence[tuple[int, int]], positions: Sequence[int]) -> tuple[list[int], list[int]]:
    """For each position: how many ids of its turn precede it, and where its turn starts (the length of the prompt
    the turn continued); a position in no turn counts as the start of its own. The sampler's minimum length reads
    both (``GenerationSettings.min_new``)."""
    steps, prompts = [], []
    for t in positions:
        a = next((a for a, e in turns if a <= t < e), t)
        steps.append(t - a)
        prompts.append(a)
    return steps, prompts
