"""Pick the source for a model spec: a local folder first, then a bundled name, then the Hub."""

from __future__ import annotations

from pathlib import Path

from tito_audit.errors import ModelNotFound, NetworkUnavailable
from tito_audit.sources.base import ModelFiles, ModelSource
from tito_audit.sources.bundled import BundledSource
from tito_audit.sources.hub import HubSource
from tito_audit.sources.local import LocalSource
from tito_audit.sources.suggest import did_you_mean


def sources(offline: bool = False) -> list[ModelSource]:
    return [LocalSource(), BundledSource(), HubSource(offline=offline)]


def fetch_model_files(spec: str, offline: bool = False) -> ModelFiles:
    """The files of ``spec``; a spec that names nothing says which known names are close to it."""
    if Path(spec).expanduser().is_file():  # reads as a Hub id (org/name), and is a file here: say what it is
        raise ModelNotFound(
            spec,
            "is a file, not a model: give the folder that holds its tokenizer files, a bundled name or a Hub repo id "
            "(a template file goes to --chat-template)",
        )
    try:
        for source in sources(offline):
            if source.claims(spec):
                return source.fetch(spec)
        raise ModelNotFound(spec, "not a local folder, a bundled name or a Hub repo id (org/name[@revision])")
    except (ModelNotFound, NetworkUnavailable) as exc:
        hint = did_you_mean(spec)
        if not hint:
            raise
        raise type(exc)(spec, exc.cause + hint) from exc
