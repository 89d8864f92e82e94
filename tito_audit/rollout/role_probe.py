"""The probe renders ``rollout.turn_roles`` reads a template's control text from.

Each probe message carries a marker (text no template writes by itself, alphanumeric so that no escaping or
trimming changes it) as its payload; what the template writes around the markers is its own text. The probes are
rendered in the first framing under which an answer renders (content as a string or as a list of text parts, with
or without a system message first), each once: the same probe is read for several roles.
"""

from __future__ import annotations

import json
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.probes import TOOLS

# Payload markers: text no template writes by itself, alphanumeric so that no escaping or trimming changes it.
USER, NEXT_USER, ANSWER_TEXT = "Zq7user1", "Zq7user2", "Zq7answer"
ARGUMENT, RESULT, THOUGHT = "Zq7argument", "Zq7result", "Zq7thought"
SECOND = "Zq7second"  # a parallel call's argument
TOOL = "get_weather"  # the probes' tool (``probes.TOOLS``)

_STOPPING = ("timeout", "too_large", "security")  # render failures after which no probe is worth rendering


class Stopped(Exception):
    """A probe render hit a limit or the sandbox."""


class RoleProbe:
    """The probe renders, in the first framing under which an answer renders (content as a string or as a list of
    text parts, with or without a system message first); a failing render is None."""

    FRAMINGS = ((False, False), (True, False), (False, True), (True, True))  # (content parts, system first)

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.tools = list(TOOLS)
        self.renders: dict[tuple[Any, ...], str | None] = {}  # the same probe is read for several roles
        self.parts, self.system = False, False
        answer = [{"role": "user", "content": USER}, {"role": "assistant", "content": ANSWER_TEXT}]
        for parts, system in self.FRAMINGS:
            self.parts, self.system = parts, system
            if ANSWER_TEXT in (self.render(answer) or ""):
                return
        self.parts, self.system = False, False

    def framed(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [{"role": "system", "content": "Zq7system"}, *messages] if self.system else messages
        if self.parts:
            out = [
                {**m, "content": [{"type": "text", "text": m["content"]}]}
                if isinstance(m.get("content"), str) and m["content"]
                else m
                for m in out
            ]
        return out

    def render(self, messages: list[dict[str, Any]], agp: bool = False, tools: bool = True) -> str | None:
        key = (json.dumps(messages, sort_keys=True), agp, tools, self.parts, self.system)
        if key in self.renders:
            return self.renders[key]
        try:
            text: str | None = self.renderer.render(
                self.framed(messages), tools=self.tools if tools else None, add_generation_prompt=agp
            )
        except RenderError as err:
            if err.kind in _STOPPING:
                raise Stopped from None  # a runaway or hostile template: no more probes (the audit classifies it)
            text = None
        self.renders[key] = text
        return text

    def first(self, marker: str, *conversations: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
        """The first of ``conversations`` whose render shows ``marker``, and it."""
        for messages in conversations:
            text = self.render(messages)
            if text is not None and marker in text:
                return text, messages
        return None, list(conversations[0])

    def mentions_reasoning(self) -> bool:
        """The template's source names reasoning at all (any other renders no reasoning words)."""
        source = self.renderer.chat_template.lower()
        return any(w in source for w in ("think", "reason", "thought", "analysis"))


def call_message(
    content: Any,
    reasoning: str | None = None,
    string: bool = False,
    argument: str = ARGUMENT,
    call_id: str = "call00001",
) -> dict[str, Any]:
    """An assistant turn of one call to the probes' tool, its argument ``argument`` (``string``: arguments as a
    JSON string)."""
    arguments: Any = {"city": argument}
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": TOOL, "arguments": json.dumps(arguments) if string else arguments},
            }
        ],
    }
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def after(text: str, marker: str) -> str | None:
    """What ``text`` writes after the last ``marker`` (None without one)."""
    at = text.rfind(marker)
    return None if at < 0 else text[at + len(marker) :]


def between(text: str, first: str, then: str) -> str | None:
    """What ``text`` writes between the last ``first`` and the ``then`` after it (None without them)."""
    at = text.rfind(first)
    if at < 0:
        return None
    end = text.find(then, at + len(first))
    return None if end < 0 else text[at + len(first) : end]
