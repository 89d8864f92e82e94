"""Model sources: where a model's tokenizer-side files come from.

``tito_audit.load`` (``sources.load.load``) is the one loader: ``fetch_model_files`` picks the source for a
model spec (a local folder, a bundled name, or a Hub repo id) and returns the folder plus what is known about
its origin, then ``load.load_files`` turns that folder into a tokenizer and a resolved chat template, the way
transformers itself would.
"""

from tito_audit.sources.base import ModelFiles, ModelSource
from tito_audit.sources.bundled import BundledSource, bundled_names
from tito_audit.sources.hub import HubSource
from tito_audit.sources.load import LoadedModel, Provenance
from tito_audit.sources.local import LocalSource
from tito_audit.sources.resolve import fetch_model_files

__all__ = [
    "BundledSource",
    "HubSource",
    "LoadedModel",
    "LocalSource",
    "ModelFiles",
    "ModelSource",
    "Provenance",
    "bundled_names",
    "fetch_model_files",
]
