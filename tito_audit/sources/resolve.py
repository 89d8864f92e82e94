"""Pick the source for a model spec: a local folder first, then a bundled name, then the Hub."""

from __future__ import annotations

from tito_audit.errors import ModelNotFound
from tito_audit.sources.base import ModelFiles, ModelSource
from tito_audit.sources.bundled import BundledSource
from tito_audit.sources.hub import HubSource
from tito_audit.sources.local import LocalSource


def sources(offline: bool = False) -> list[ModelSource]:
    return [LocalSource(), BundledSource(), HubSource(offline=offline)]


def fetch_model_files(spec: str, offline: bool = False) -> ModelFiles:
    for source in sources(offline):
        if source.claims(spec):
            return source.fetch(spec)
    raise ModelNotFound(spec, "not a local folder, a bundled name or a Hub repo id (org/name[@revision])")
