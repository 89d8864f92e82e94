"""What one ``tito-audit rl`` run produced (its own module so that the loop and the plots both import it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def rl_libraries() -> dict[str, Any]:
    """What produced an ``rl`` run: the libraries every report names (``compat.library_versions``) and torch, whose
    kernels compute the gradients compared."""
    import torch

    from tito_audit.compat import library_versions

    return {**library_versions(), "torch": torch.__version__}


@dataclass
class RLResult:
    config: dict[str, Any]
    setup: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    libraries: dict[str, Any] = field(default_factory=rl_libraries)

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "setup": self.setup,
            "summary": self.summary,
            "steps": self.steps,
            "files": self.files,
            "libraries": self.libraries,
        }
