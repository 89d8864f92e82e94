"""A sweep's counterexample, shrunk by hand as hypothesis would: the fewest tool cycles, exchanges and turns, each
message as simple as it can be, that still break.

A sweep (``sweep``) is a long episode, not a draw: hypothesis cannot shrink it. So its break is shrunk here, in the
order hypothesis' shrinker would take: whole tool cycles first, by halves as delta debugging does (``_fewer``), then
the exchanges of an answer and a user turn after them, a last user turn and its answer, and then each turn made
simpler one way at a time (``_simpler``): without its reasoning, without the text next to its calls, each argument
left out. Every step is kept only where the conversation still breaks
(``breaks``, which bounds the plays).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tito_audit.audit.search.sweep import like_sweep
from tito_audit.scenarios.searched import Conversation, Message


def shrunk(conversation: Conversation, breaks: Callable[[Conversation], bool]) -> Conversation:
    """``conversation`` (which breaks) with its tool cycles dropped while it still breaks (``_fewer``), then
    its exchanges of an answer and a user turn after the cycles (``sweep_answers``'), then a last user turn and its
    answer, then each turn simplified (``_simpler``), while ``breaks`` still holds (it bounds the plays: past its
    bound it answers False, which keeps what is left)."""
    still = lambda ms: breaks(like_sweep(ms, conversation))  # noqa: E731
    messages = _fewer(list(conversation.messages), _cycles, still)
    if len(_exchanges(messages)) > 1:  # the sweep of answers' (another sweep's one is the tail, below)
        messages = _fewer(messages, _exchanges, still, keep=0, last_first=True)
    tail = messages[-2:]  # a user turn and its answer after the last tool cycle (``sweep``'s): dropped if not needed
    earlier_user = any(m["role"] == "user" for m in messages[:-2])
    if (
        [m["role"] for m in tail] == ["user", "assistant"]
        and earlier_user
        and breaks(like_sweep(messages[:-2], conversation))
    ):
        messages = messages[:-2]
    for i in range(len(messages)):
        tried = 0
        while tried < len(options := _simpler(messages[i])):  # each accepted step makes the message anew
            candidate = [*messages[:i], options[tried], *messages[i + 1 :]]
            if breaks(like_sweep(candidate, conversation)):
                messages = candidate
            else:
                tried += 1
    return like_sweep(messages, conversation)


def _cycles(messages: list[Message]) -> list[tuple[int, int]]:
    """Each tool cycle's span: a call turn (with a text alone just before it, ``sweep_turns``'), then its results."""
    spans = []
    for start, m in enumerate(messages):
        if not m.get("tool_calls"):
            continue
        end = next((i for i in range(start + 1, len(messages)) if messages[i]["role"] != "tool"), len(messages))
        before = messages[start - 1] if start else None
        if before is not None and before["role"] == "assistant" and not before.get("tool_calls"):
            start -= 1  # a text alone before the call: part of its cycle
        spans.append((start, end))
    return spans


def _exchanges(messages: list[Message]) -> list[tuple[int, int]]:
    """Each exchange of an answer and the user turn after it, once the conversation's tool cycles are over (the
    sweep of answers'; another sweep has one at most, before its last user turn and answer)."""
    last_call = max((i for i, m in enumerate(messages) if m.get("tool_calls")), default=-1)
    return [
        (i, i + 2)
        for i in range(last_call + 1, len(messages) - 1)
        if messages[i]["role"] == "assistant" and messages[i + 1]["role"] == "user"
    ]


def _fewer(
    messages: list[Message],
    units: Callable[[list[Message]], list[tuple[int, int]]],
    breaks: Callable[[list[Message]], bool],
    keep: int = 1,
    last_first: bool = False,
) -> list[Message]:
    """``messages`` without every run of ``units`` (tool cycles, exchanges) whose dropping keeps the break (``keep``
    of them always kept: a tool cycle, none of the exchanges): runs of half the units first, then of a quarter, down
    to one, as delta debugging does. A break one unit causes is found in about twice the logarithm of the units'
    number of plays, most of them of shorter conversations (a sweep's thirty-odd cycles, each played whole, had spent
    a template's render budget one by one). ``last_first``: the runs are tried from the end, so that of two units
    that break alike the earlier stays (the sweep of answers' cores come simplest first)."""
    size = max(1, len(units(messages)) // 2)
    while True:
        k = 0
        while len(spans := units(messages)) > keep and k < len(spans):
            block = spans[::-1][k : k + size] if last_first else spans[k : k + size]
            if len(spans) - len(block) < keep:  # never fewer than ``keep``
                break
            drop = {i for a, b in block for i in range(a, b)}
            candidate = [m for i, m in enumerate(messages) if i not in drop]
            if breaks(candidate):
                messages = candidate
            else:
                k += size
        if size == 1:
            return messages
        size //= 2


def _simpler(message: Message) -> list[Message]:
    """``message`` made simpler in one way each, in order: without its reasoning, without the text next to its
    calls, each argument of each call left out."""
    if message["role"] != "assistant":
        return []
    out: list[Message] = []
    if "reasoning_content" in message:
        out.append({k: v for k, v in message.items() if k != "reasoning_content"})
    if message.get("tool_calls") and message.get("content"):
        out.append({**message, "content": None})
    for call_index, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call["function"]["arguments"], dict):
            continue  # a JSON string: left whole
        for key in call["function"]["arguments"]:
            args = {k: v for k, v in call["function"]["arguments"].items() if k != key}
            out.append(_with_call(message, call_index, {**call["function"], "arguments": args}))
    return out


def _with_call(message: Message, index: int, function: dict[str, Any]) -> Message:
    calls = list(message["tool_calls"])
    calls[index] = {**calls[index], "function": function}
    return {**message, "tool_calls": calls}
