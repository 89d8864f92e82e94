"""Control words inside one assistant message: around its reasoning, and between two of its payloads.

An engine samples one assistant message as one turn, so a word written between two of its payloads (after its
reasoning, between parallel calls: ``</tool_call>``, gpt-oss's ``<|end|>`` between channels) never ends the turn,
whatever it ends elsewhere. Read from probe renders (``rollout.role_probe``) for ``rollout.turn_roles``.
"""

from __future__ import annotations

from typing import Any

from tito_audit.rollout.control_words import control_words, rest, spans
from tito_audit.rollout.role_probe import (
    ANSWER_TEXT,
    ARGUMENT,
    SECOND,
    THOUGHT,
    TOOL,
    RoleProbe,
    call_message,
)


def inner_words(probe: RoleProbe, user: dict[str, Any], prompt: str | None, call: dict[str, Any]) -> tuple[str, ...]:
    """Control words the template writes inside one assistant message, between two of its payloads: between
    parallel calls, after reasoning and before the answer or call (for a template whose source mentions reasoning
    at all). These are the shapes a model samples as one turn in any tool loop. Content next to calls is not among
    them: some templates write it as two turns when the message is the last (Nemotron Nano v2); their turn end stays
    the turn end, and the simulation names the message an engine would cut there. ``call``: a tool-call message in
    the shape the template renders."""
    string = isinstance(call["tool_calls"][0]["function"]["arguments"], str)
    parallel = call_message(call["content"], string=string)
    parallel["tool_calls"] += call_message(None, string=string, argument=SECOND, call_id="call00002")["tool_calls"]
    messages: list[tuple[dict[str, Any], tuple[str, ...]]] = [(parallel, (ARGUMENT, SECOND))]
    if probe.mentions_reasoning():
        messages += [
            ({"role": "assistant", "content": ANSWER_TEXT, "reasoning_content": THOUGHT}, (THOUGHT, ANSWER_TEXT)),
            (call_message(call["content"], THOUGHT, string), (THOUGHT, ARGUMENT)),
        ]
    words: list[str] = []
    for message, markers in messages:
        text = probe.render([user, message])
        if text is None:
            continue
        completion = rest(prompt, text) if prompt else text
        at = sorted((completion.find(m), m) for m in markers if m in completion)
        if len(at) == len(markers):
            words += [w for _, _, w in spans(completion, at[0][0] + len(at[0][1]), at[-1][0], runs=True)]
    return tuple(dict.fromkeys(words))


def reasoning_words(probe: RoleProbe, user: dict[str, Any]) -> tuple[str, ...]:
    """Control words around a reasoning payload, on an answer and on a tool call (for a template whose source
    mentions reasoning at all: any other renders none)."""
    words: list[str] = []
    if not probe.mentions_reasoning():
        return ()
    prompt = probe.render([user], agp=True) or ""
    for message in (
        {"role": "assistant", "content": ANSWER_TEXT, "reasoning_content": THOUGHT},
        call_message(None, THOUGHT),
    ):
        text = probe.render([user, message])
        if text is None or THOUGHT not in text:
            continue
        completion = rest(prompt, text)
        at = completion.find(THOUGHT)
        ends = [i for i in (completion.find(ANSWER_TEXT), completion.find(TOOL), completion.find(ARGUMENT)) if i > at]
        words += control_words(completion[:at])
        words += control_words(completion[at + len(THOUGHT) : min(ends) if ends else len(completion)])
    return tuple(dict.fromkeys(words))
