"""What one ``tito-audit rl`` run produced (its own module so that the loop and the plots both import it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RLResult:
    config: dict[str, Any]
    setup: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "setup": self.setup,
            "summary": self.summary,
            "steps": self.steps,
            "files": self.files,
        }
