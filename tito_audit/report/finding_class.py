"""The cause of a divergence (its finding class), picked from what differs: one rule for the audit and replay.

Both sides are given as the runs that differ (the ids from where the two sequences part to where they agree again,
``ref`` what a correct loop holds, ``got`` what the other path produced) and their texts as they read in place.
The class follows from the runs alone: the same text with other ids is ``non_canonical``; reasoning the
conversation carried, or one of the template's reasoning delimiters, in either run (``ReasoningMarks``, derived
from the template and the messages: never a word that merely reads like one, so "I think" in an answer is
content) is ``history_rewrite``; an inserted or dropped run is ``stop_seam`` when it is only stop tokens,
``whitespace`` when only whitespace, ``special_token`` for a doubled BOS, else ``history_rewrite``; a stop token at
the start of either run, or a different number of them in runs that differ by those alone, ``stop_seam`` (runs that
differ in content too are judged by their content: an old result cut short reads up to the next turn's stop in one
run); whitespace added at an edge
``whitespace``; content one run has beyond the other ``history_rewrite``; the same content with other JSON
punctuation or spacing ``serialization``; other spacing ``whitespace``; the same ids apart from control tokens
``special_token``; a loss-mask difference on a stop token ``stop_seam``, elsewhere ``template``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

JSON_CHARS = frozenset('{}":,[]')
_MIN_SHARED = 12  # characters of reasoning text a run must share with it (all of it when shorter)


@dataclass(frozen=True)
class ReasoningMarks:
    """What reasoning looks like in one conversation under one template: the template's reasoning delimiters
    (``scenarios.reasoning``) and the reasoning texts the conversation carried."""

    delimiters: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()

    def found_in(self, text: str) -> bool:
        """``text`` (a differing run) holds a reasoning delimiter or a part of a reasoning text."""
        if not text or not text.strip():
            return False
        if any(d in text for d in self.delimiters):
            return True
        for thought in self.texts:
            need = min(_MIN_SHARED, len(thought.strip()))
            # a common substring of ``need`` characters: some ``need``-long piece of the run is in the reasoning
            if need and any(text[i : i + need] in thought for i in range(len(text) - need + 1)):
                return True
        return False


def run_text(decode: Callable[[Sequence[int]], str], seq: Sequence[int], i1: int, i2: int) -> str:
    """Text of ``seq[i1:i2]`` as it reads inside ``seq``: decoded after the id before it, whose own text is cut
    off, because a run decoded alone loses a SentencePiece leading space (``'▁{'`` reads ``'{'``)."""
    if i1 <= 0:
        return decode(seq[i1:i2])
    head, both = decode(seq[i1 - 1 : i1]), decode(seq[i1 - 1 : i2])
    return both[len(head) :] if both.startswith(head) else decode(seq[i1:i2])


def _without(text: str, chars: frozenset[str]) -> str:
    return "".join(c for c in text if c not in chars and not c.isspace())


def pick_class(
    ref: Sequence[int],
    got: Sequence[int],
    *,
    texts: tuple[str, str] | None,
    stop_ids: Collection[int],
    special_ids: Collection[int] = (),
    bos_id: int | None = None,
    reasoning: ReasoningMarks | None = None,
    mask_only: bool = False,
) -> str:
    """The finding class of a divergence between the runs ``ref`` and ``got`` (see the module docstring);
    ``texts``: their texts as they read in place (None when no tokenizer is at hand). The rules are tried in the
    docstring's order: a loss-mask difference, then what the ids and the reasoning say, then what the texts say."""
    stops = set(stop_ids)
    if mask_only:
        return "stop_seam" if any(t in stops for t in ref) else "template"
    text_ref, text_got = texts if texts is not None else (None, None)
    found = _by_runs(ref, got, text_ref, text_got, stops, bos_id, reasoning)
    if found is not None:
        return found
    if text_ref is None or text_got is None:
        return "template"
    return _by_text(ref, got, text_ref, text_got, set(special_ids))


def _by_runs(
    ref: Sequence[int],
    got: Sequence[int],
    text_ref: str | None,
    text_got: str | None,
    stops: set[int],
    bos_id: int | None,
    reasoning: ReasoningMarks | None,
) -> str | None:
    """The class the runs' ids decide (a doubled BOS, the same text with other ids, reasoning in either run, a run
    inserted or dropped, stop tokens at the start or in other numbers), or None."""
    if bos_id is not None and not (ref and got) and [*ref, *got][:1] == [bos_id]:
        return "special_token"
    if ref and got and text_ref is not None and text_ref == text_got:
        return "non_canonical"
    if reasoning is not None and (reasoning.found_in(text_ref or "") or reasoning.found_in(text_got or "")):
        return "history_rewrite"
    if not ref or not got:
        return _inserted_or_dropped([*ref, *got], text_ref or text_got, stops)
    if ref[0] in stops or got[0] in stops:
        return "stop_seam"
    in_ref, in_got = sum(t in stops for t in ref), sum(t in stops for t in got)
    if in_ref != in_got and _only_stops_apart(ref, got, text_ref, text_got, stops, in_ref > in_got):
        return "stop_seam"
    return None


def _only_stops_apart(
    ref: Sequence[int], got: Sequence[int], text_ref: str | None, text_got: str | None, stops: set[int], ref_more: bool
) -> bool:
    """Whether two runs with other numbers of stop tokens differ by those alone: the same ids apart from them, or the
    text of the run with more of them continuing the other's (``'".<|im_end|>'`` against ``'".'``: the turn split
    otherwise too). Runs that differ in content (an old result cut short, read up to the next turn's stop) do not."""
    if [t for t in ref if t not in stops] == [t for t in got if t not in stops]:
        return True
    if text_ref is None or text_got is None:
        return False
    more, fewer = (text_ref, text_got) if ref_more else (text_got, text_ref)
    return bool(fewer.strip()) and more.startswith(fewer.rstrip())


def _inserted_or_dropped(run: Sequence[int], text: str | None, stops: set[int]) -> str:
    """The class of a run one side has and the other lacks: only stop tokens, only whitespace, or content."""
    if all(t in stops for t in run):
        return "stop_seam"
    return "whitespace" if text and not text.strip() else "history_rewrite"


def _by_text(ref: Sequence[int], got: Sequence[int], text_ref: str, text_got: str, specials: set[int]) -> str:
    """The class two differing runs' texts decide: whitespace at an edge, content one has beyond the other, other
    JSON punctuation or spacing, other spacing, other control tokens; else a history rewrite."""
    if text_ref.strip() == text_got.strip():  # whitespace added or dropped at an edge
        return "whitespace"
    short, long = sorted((text_ref, text_got), key=len)
    if long.startswith(short) and long[len(short) :].strip():  # content dropped or added, not reformatted
        return "history_rewrite"
    both = text_ref + text_got
    if any(c in both for c in JSON_CHARS) and _without(text_ref, JSON_CHARS) == _without(text_got, JSON_CHARS):
        return "serialization"  # the same content, other JSON punctuation or spacing
    if _without(text_ref, frozenset()) == _without(text_got, frozenset()):
        return "whitespace"
    if any(t in specials for t in (*ref, *got)) and [t for t in ref if t not in specials] == [
        t for t in got if t not in specials
    ]:
        return "special_token"  # the same ids apart from control tokens
    return "history_rewrite"
