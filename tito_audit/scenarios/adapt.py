"""Adapt a conversation to what a template accepts, instead of giving up on the model.

Templates reject things (a ``tool`` or ``system`` role, two messages of one role in a row). Each adapter is
a rewrite an RL practitioner would apply by hand for that model; they are tried in order only after the
template has refused the plain conversation, and the ones used are recorded with the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tito_audit.scenarios.spec import Message


def _tool_as_user(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    for m in messages:
        if m["role"] == "tool":
            text = m.get("content") or ""
            if out and out[-1]["role"] == "user" and out[-1].get("_from_tool"):
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + text}
            else:
                out.append({"role": "user", "content": text, "_from_tool": True})
        else:
            out.append(m)
    return [{k: v for k, v in m.items() if k != "_from_tool"} for m in out]


def _system_into_user(messages: list[Message]) -> list[Message]:
    if not messages or messages[0]["role"] != "system":
        return messages
    system, rest = messages[0], messages[1:]
    for i, m in enumerate(rest):
        if m["role"] == "user":
            merged = {**m, "content": f"{system.get('content') or ''}\n\n{m.get('content') or ''}"}
            return [*rest[:i], merged, *rest[i + 1 :]]
    return rest


def _calls_as_content(messages: list[Message]) -> list[Message]:
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [c.get("function", c) for c in m["tool_calls"]]
            text = "\n".join(json.dumps({"name": c["name"], "arguments": c["arguments"]}) for c in calls)
            m = {"role": "assistant", "content": ((m.get("content") or "") + text)}
        out.append(m)
    return out


ADAPTERS: dict[str, Callable[[list[Message]], list[Message]]] = {
    "system_into_user": _system_into_user,
    "tool_as_user": _tool_as_user,
    "calls_as_content": _calls_as_content,
}


def adapt_messages(messages: list[Message], names: tuple[str, ...]) -> list[Message]:
    for name in names:
        messages = ADAPTERS[name](messages)
    return messages
