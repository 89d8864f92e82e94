"""One conversation of the counterexample search (``audit.search``): its messages, tool declarations and template
kwargs, the scenario it is played as, and the plain form a report keeps it in (``as_dict``/``from_dict``: what
``fix`` replays to read the same facts as the audit it patches)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tito_audit.rollout.call_arguments import arguments_dict
from tito_audit.scenarios.spec import Scenario

Message = dict[str, Any]


@dataclass(frozen=True)
class Conversation:
    """One drawn conversation: its messages, the tool declarations of the names it calls, the template kwargs."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> str:
        """A key equal for equal conversations (the search's memo)."""
        return json.dumps([self.messages, self.kwargs], sort_keys=True, default=repr)

    def scenario(self, sid: str) -> Scenario:
        tags = {"search", "tool"}
        if any(m.get("reasoning_content") for m in self.messages):
            tags.add("thinking")
        if any(len(m.get("tool_calls") or []) > 1 for m in self.messages):
            tags.add("parallel")
        if self.messages and self.messages[0]["role"] == "system":
            tags.add("system")
        return Scenario(sid, self.describe(), self.messages, self.tools, frozenset(tags), self.kwargs)

    def describe(self) -> str:
        """A one-line summary: roles, calls, names, argument counts, switches."""
        calls = [c["function"] for m in self.messages for c in m.get("tool_calls") or []]
        names = sorted({c["name"] for c in calls})
        parts = [f"{len(self.messages)} messages", f"{len(calls)} call(s)"]
        if names:
            parts.append("names " + ", ".join(names))
        if calls:
            parts.append(f"up to {max(_count(c['arguments']) for c in calls)} argument(s)")
        if any(m.get("reasoning_content") for m in self.messages):
            parts.append("reasoning")
        parts += [f"{k}={json.dumps(v)}" for k, v in self.kwargs]
        return "searched: " + ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"messages": list(self.messages), "tools": list(self.tools), "template_kwargs": dict(self.kwargs)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Conversation:
        kwargs = tuple(sorted((data.get("template_kwargs") or {}).items()))
        return cls(tuple(data["messages"]), tuple(data.get("tools") or ()), kwargs)


def _count(arguments: Any) -> int:
    """How many top-level arguments a call has (its arguments a dict, or a JSON string of one)."""
    parsed = arguments_dict(arguments)
    return 1 if parsed is None else len(parsed)
