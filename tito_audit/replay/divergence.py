"""What one replayed episode can diverge by, and how a divergence is named.

A divergence compares a reference (what a correct loop holds: the sampled ids kept in a buffer, deltas
appended) with what the trainer trained on. Its class is one of the audit's finding classes
(``tito_audit.report.findings.FINDING_CLASSES``), picked by the audit's own rule
(``tito_audit.report.finding_class.pick_class``) from the differing runs on both sides and their text as it
reads in place (``run_text``), with the reasoning the episode carried and the template's reasoning delimiters
(``ReasoningMarks``) telling reasoning from content.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tito_audit.report.finding_class import pick_class, run_text
from tito_audit.report.findings import FINDING_CLASSES

Kind = Literal["ids", "mask", "shape", "missing", "context", "drift", "logprobs", "environment"]
classify = pick_class  # the audit's rule (``tito_audit.report.finding_class``): one rule names every divergence
__all__ = ["Divergence", "classify", "run_text", "window"]


@dataclass
class Divergence:
    """The first place a turn of an episode departs from the reference."""

    turn: int  # 0-based assistant turn whose region holds it (-1: the whole episode, e.g. a shape mismatch)
    index: int | None  # first divergent position in the trained sequence
    cls: str  # one of FINDING_CLASSES
    kind: Kind
    message: str
    ref_index: int | None = None  # the same place in the reference sequence
    expected: list[int] = field(default_factory=list)  # reference ids from ``context_start``
    actual: list[int] = field(default_factory=list)  # trained ids from ``context_start``
    context_start: int | None = None  # position of expected[0] / actual[0] (both sides aligned there)
    tokens: int = 0  # sampled tokens affected in this turn
    logprob_mass: float | None = None  # sum of the engine's log-probs over those tokens, when the log has them
    # every class the turn's differing runs hold, ``cls`` first: a turn counts in each (no class hides another)
    classes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cls not in self.classes:
            self.classes.insert(0, self.cls)
        assert all(c in FINDING_CLASSES for c in self.classes), self.classes

    @property
    def folded(self) -> list[str]:
        """The turn's classes other than ``cls`` (the finding is named by ``cls``; these are counted too)."""
        return [c for c in self.classes if c != self.cls]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def window(
    ref: Sequence[int], got: Sequence[int], ref_at: int, got_at: int, radius: int = 6
) -> tuple[int, list[int], list[int], int]:
    """Ids around a divergence on both sides, aligned so both start ``radius`` before it: (offset, ref, got,
    start in the trained sequence)."""
    back = min(radius, ref_at, got_at)
    return (
        back,
        list(ref[ref_at - back : ref_at + radius + 1]),
        list(got[got_at - back : got_at + radius + 1]),
        got_at - back,
    )
