"""The interface every model source implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# The files a tokenizer and its chat template can live in; weights are never fetched.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "additional_chat_templates/*",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "vocab.txt",
    "*.tiktoken",
    # Not tokenizer files, but tiny and needed: stop tokens (generation_config) and the model type
    # that AutoTokenizer falls back on when tokenizer_config.json names no class.
    "generation_config.json",
    "config.json",
)


@dataclass(frozen=True)
class ModelFiles:
    """A folder holding a model's tokenizer-side files, and where it came from."""

    spec: str
    folder: Path
    source: str  # "hub" | "local" | "bundled"
    repo_id: str | None = None
    revision: str | None = None
    license: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


class ModelSource(Protocol):
    """A place models come from. ``claims`` is cheap and decides which source handles a spec."""

    name: str

    def claims(self, spec: str) -> bool: ...

    def fetch(self, spec: str) -> ModelFiles: ...
