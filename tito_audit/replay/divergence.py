"""What one replayed episode can diverge by, and how a divergence is named.

A divergence compares a reference (what a correct loop holds: the sampled ids kept in a buffer, deltas
appended) with what the trainer trained on. Its class is one of the audit's finding classes
(``tito_audit.checks.base.FINDING_CLASSES``), chosen from the ids on both sides and their text as it reads in
place (``run_text``): same text with other ids is ``non_canonical``; an inserted or dropped run
``history_rewrite`` (``stop_seam`` when it is only stop tokens, ``whitespace`` when it is only whitespace,
``special_token`` for a doubled BOS); a stop token at the start of either side, or a different number of them,
``stop_seam``; reasoning text, or content one side has and the other lacks, ``history_rewrite``; whitespace
added at an edge ``whitespace``; the same content with other JSON punctuation or spacing ``serialization``;
other spacing ``whitespace``; the same ids apart from control tokens ``special_token``; a loss-mask difference
on a stop token ``stop_seam``, elsewhere ``template``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tito_audit.findings import FINDING_CLASSES

Kind = Literal["ids", "mask", "shape", "missing", "context", "drift", "logprobs"]
JSON_CHARS = frozenset('{}":,[]')
REASONING_MARKERS = ("think", "reasoning", "analysis")


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

    def __post_init__(self) -> None:
        assert self.cls in FINDING_CLASSES, self.cls

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_text(decode: Callable[[Sequence[int]], str], seq: Sequence[int], i1: int, i2: int) -> str:
    """Text of ``seq[i1:i2]`` as it reads inside ``seq``: decoded after the id before it, whose own text is cut
    off, because a run decoded alone loses a SentencePiece leading space (``'▁{'`` reads ``'{'``)."""
    if i1 <= 0:
        return decode(seq[i1:i2])
    head, both = decode(seq[i1 - 1 : i1]), decode(seq[i1 - 1 : i2])
    return both[len(head) :] if both.startswith(head) else decode(seq[i1:i2])


def _without(text: str, chars: frozenset[str]) -> str:
    return "".join(c for c in text if c not in chars and not c.isspace())


def classify(
    ref: Sequence[int],
    got: Sequence[int],
    *,
    texts: tuple[str, str] | None,
    stop_ids: Collection[int],
    special_ids: Collection[int] = (),
    bos_id: int | None = None,
    mask_only: bool = False,
) -> str:
    """Name a divergence from the ids on both sides (``ref`` what a correct loop holds, ``got`` what was trained)
    and their texts as they read in place (``run_text``; None when no tokenizer is at hand)."""
    stops = set(stop_ids)
    if mask_only:
        return "stop_seam" if any(t in stops for t in ref) else "template"
    if bos_id is not None and not (ref and got) and [*ref, *got][:1] == [bos_id]:
        return "special_token"
    text_ref, text_got = texts if texts is not None else (None, None)
    if ref and got and text_ref is not None and text_ref == text_got:
        return "non_canonical"
    if not ref or not got:  # a run inserted or dropped
        if all(t in stops for t in (*ref, *got)):
            return "stop_seam"
        run = text_ref or text_got
        return "whitespace" if run and not run.strip() else "history_rewrite"
    if ref[0] in stops or got[0] in stops or sum(t in stops for t in ref) != sum(t in stops for t in got):
        return "stop_seam"
    if text_ref is None or text_got is None:
        return "template"
    both = text_ref + text_got
    if any(m in both for m in REASONING_MARKERS):
        return "history_rewrite"
    if text_ref.strip() == text_got.strip():  # whitespace added or dropped at an edge
        return "whitespace"
    short, long = sorted((text_ref, text_got), key=len)
    if long.startswith(short) and long[len(short) :].strip():  # content dropped or added, not reformatted
        return "history_rewrite"
    if any(c in both for c in JSON_CHARS) and _without(text_ref, JSON_CHARS) == _without(text_got, JSON_CHARS):
        return "serialization"  # the same content, other JSON punctuation or spacing
    if _without(text_ref, frozenset()) == _without(text_got, frozenset()):
        return "whitespace"
    specials = set(special_ids)
    if any(t in specials for t in (*ref, *got)) and [t for t in ref if t not in specials] == [
        t for t in got if t not in specials
    ]:
        return "special_token"  # the same ids apart from control tokens
    return "history_rewrite"


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
