"""The declarative shape of a scenario and the concrete conversation built from it.

A spec is a list of steps ("user", "call", "tool", "final", ...) plus a content variant; the builder in
``catalog.py`` turns it into OpenAI-style messages. Keeping specs declarative lets a reader see the whole
catalog at a glance and lets tests enumerate what is covered.
"""

from __future__ import annotations

import json
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
        return json.loads(json.dumps(self.messages))

    def assistant_indices(self) -> list[int]:
        return [i for i, m in enumerate(self.messages) if m["role"] == "assistant"]
