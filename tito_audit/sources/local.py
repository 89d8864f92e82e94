"""A folder on disk that already holds tokenizer files (a training checkpoint, a patched copy...)."""

from __future__ import annotations

from pathlib import Path

from tito_audit.errors import ModelNotFound
from tito_audit.sources.base import ModelFiles


class LocalSource:
    name = "local"

    def claims(self, spec: str) -> bool:
        return Path(spec).expanduser().is_dir() or spec.startswith((".", "/", "~"))

    def fetch(self, spec: str) -> ModelFiles:
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            raise ModelNotFound(spec, f"local folder {folder} does not exist")
        return ModelFiles(spec=spec, folder=folder.resolve(), source="local")
