"""Where an assistant turn starts in the render that ends with it.

Usually where that render parts from the generation prompt before it. A template that rewrites the history once the
turn follows (gpt-oss drops an earlier call's analysis once a final answer follows, Mistral moves the system prompt
out of the last user turn) parts them inside an earlier message: the turn then starts where the history it follows
ends, found as the longest tail of that history (from the point of departure) that the render still writes, once.
Where nothing of the generation prompt follows that tail, it may be the turn end the turn writes too (a template that
ends an earlier turn only when no assistant turn follows at once, or drops an earlier result once a new call turn
follows): the turn then starts after the generation prompt, where the render writes it once before that tail with
the turn's own message between them, and the tail is one line that holds none of it (not a trailer the template
writes after the last message: tool declarations, an instruction to the model). Where they part in the generation
prompt itself, the turn starts there (a generation prompt that history lacks), or after the rest of it where the
render writes only whitespace before that rest (an earlier turn's end written with another line end once an
assistant turn follows).
"""

from __future__ import annotations

from collections.abc import Callable

from tito_audit.rollout.tokens import common_prefix_len


def _longest_tail(text: str, lo: int, within: str, start: int) -> int:
    """The smallest ``p >= lo`` whose tail ``text[p:]`` occurs in ``within`` from ``start`` (every tail of a tail
    that occurs occurs too: bisect)."""
    hi = len(text)
    while lo < hi:
        mid = (lo + hi) // 2
        if within.find(text[mid:], start) >= 0:
            hi = mid
        else:
            lo = mid + 1
    return lo


def turn_start(prompt: str, full: str, history: Callable[[], str], own: Callable[[str], bool] | None = None) -> int:
    """Where the turn starts in ``full``; ``prompt``: the generation prompt before it; ``history``: the render of the
    same messages without a generation prompt (called only where ``prompt`` and ``full`` part); ``own``: whether a
    text holds something of the turn's own message (its text, reasoning or calls), which a start after the generation
    prompt needs where the history's tail is the turn's own end (without it, that start is not tried)."""
    start = common_prefix_len(prompt, full)
    if start >= len(prompt):
        return start
    before = history()
    gen = common_prefix_len(before, prompt)  # where the generation prompt starts in ``prompt``
    if start >= gen:
        # they part in the generation prompt itself (a prefill history lacks): the turn starts there, unless the
        # render writes only whitespace before the rest of it, once (an earlier turn's end written with another
        # line end once an assistant turn follows at once): the turn then starts after that rest
        rest = prompt[start:]
        again = full.find(rest, start)
        if rest.strip() and again > start and not full[start:again].strip() and full.find(rest, again + 1) < 0:
            return again + len(rest)
        return start
    tail = before[_longest_tail(before[:gen], start, full, start) : gen]
    at = full.find(tail, start)
    if not tail.strip():
        return start  # nothing of the history is left to anchor on: keep the point of departure
    if full.find(tail, at + 1) >= 0:
        # the tail recurs (a turn end the turn writes too, after a rewritten tool result): the one place where the
        # generation prompt follows it, or none
        anchored = tail + prompt[gen:]
        at = full.find(anchored, start)
        if at < 0 or full.find(anchored, at + 1) >= 0:
            return start
    end = at + len(tail)
    opened = common_prefix_len(prompt[gen:], full[end:])
    if prompt[gen:] and not opened and own is not None:
        # nothing of the generation prompt follows the tail: it may be the turn's own end (``<|im_end|>``, where the
        # template writes an earlier turn's end only when no assistant turn follows at once); where the render
        # writes the generation prompt once between the point of departure and that tail (from where an opener that
        # ends past the point of departure can start: its start may be shared), and the turn's own message between
        # that and the tail, the turn starts after it. Only where the tail is a turn end: one line, none of the
        # message in it; not a trailer the template writes after the last message (the tool declarations, an
        # instruction to the model), which the turn does not sample
        opener = full.find(prompt[gen:], max(0, start - len(prompt) + gen + 1), at)
        after = opener + len(prompt) - gen
        unique = opener >= 0 and full.find(prompt[gen:], opener + 1, at) < 0
        one_line = "\n" not in tail.rstrip("\r\n")
        if unique and one_line and own(full[after:at]) and not own(tail):
            return after
    return end + opened
