"""The declarative shape of a scenario and the concrete conversation built from it.

A spec is a list of steps ("user", "call", "tool", "final", ...) plus a content variant; the builder in
``catalog.py`` turns it into OpenAI-style messages. Keeping specs declarative lets a reader see the whole
catalog at a glance and lets tests enumerate what is covered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]


@dataclass(frozen=True)
class ScenarioSpec:
    id: str
    steps: tuple[str, ...]
    variant: str = "plain"
    description: str = ""
    tags: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Scenario:
    id: str
    description: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    tags: frozenset[str]
    template_kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.template_kwargs)

    def messages_list(self) -> list[Message]:
        """A copy of the messages the caller may change: JSON's own value types, every dict and list fresh (as a JSON
        round trip gives them, at about half its cost: a scan copies every scenario once per template)."""
        return [_json_copy(m) for m in self.messages]

    def assistant_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m["role"] == "assistant"]


def _json_copy(value: Any) -> Any:
    """``json.loads(json.dumps(value))`` for values built from dicts with string keys, lists, tuples and scalars."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_copy(item) for item in value]
    return value
