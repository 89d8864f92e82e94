"""The Hugging Face Hub, through huggingface_hub's own download and cache code.

Honours HF_TOKEN, HF_HOME / HF_HUB_CACHE and HF_HUB_OFFLINE exactly as huggingface_hub does, because it is
huggingface_hub doing the work. Only tokenizer-side files are downloaded. huggingface_hub is imported on first
fetch (its HTTP stack is a tenth of a second that ``--help`` and local folders need not pay).
"""

from __future__ import annotations

import re
from pathlib import Path

from tito_audit.errors import AuditError, GatedModel, ModelNotFound, NetworkUnavailable, RevisionNotFound
from tito_audit.sources.base import TOKENIZER_FILES, ModelFiles

_REPO_ID = re.compile(r"^[\w.\-]+/[\w.\-]+(@[\w.\-/]+)?$")


def split_revision(spec: str) -> tuple[str, str | None]:
    """``org/name@rev`` -> (``org/name``, ``rev``)."""
    repo_id, _, revision = spec.partition("@")
    return repo_id, revision or None


class HubSource:
    name = "hub"

    def __init__(self, offline: bool = False) -> None:
        self.offline = offline

    def claims(self, spec: str) -> bool:
        return bool(_REPO_ID.match(spec))

    def fetch(self, spec: str) -> ModelFiles:
        from huggingface_hub import constants, snapshot_download

        repo_id, revision = split_revision(spec)
        offline = self.offline or constants.HF_HUB_OFFLINE
        revision = cached_full_revision(repo_id, revision)
        try:
            folder = snapshot_download(
                repo_id,
                revision=revision,
                allow_patterns=list(TOKENIZER_FILES),
                local_files_only=offline,
            )
        except AuditError:
            raise
        except Exception as exc:  # classified below; anything unknown stays an operational error
            raise _classify(spec, repo_id, revision, offline, exc) from exc
        folder_path = Path(folder)
        return ModelFiles(
            spec=spec,
            folder=folder_path,
            source="hub",
            repo_id=repo_id,
            revision=folder_path.name,
        )


def _cached_repo_folder(repo_id: str) -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))


_SHORT_SHA = re.compile(r"^[0-9a-f]{4,39}$")


def cached_full_revision(repo_id: str, revision: str | None) -> str | None:
    """A short commit hash (as reports print it) -> the one cached snapshot it starts, else unchanged: the cache
    is keyed by full hashes, so ``org/name@9b9325d`` would otherwise be "not in the local cache" offline."""
    if revision is None or not _SHORT_SHA.match(revision):
        return revision
    snapshots = _cached_repo_folder(repo_id) / "snapshots"
    if not snapshots.is_dir():
        return revision
    matches = [p.name for p in snapshots.iterdir() if p.name.startswith(revision)]
    return matches[0] if len(matches) == 1 else revision


def _status(exc: BaseException | None) -> int | None:
    """The HTTP status anywhere in the exception chain (snapshot_download wraps 403s in cache errors)."""
    seen = 0
    while exc is not None and seen < 10:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(status, int):
            return status
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _classify(spec: str, repo_id: str, revision: str | None, offline: bool, exc: Exception) -> AuditError:
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    status = _status(exc)
    if isinstance(exc, GatedRepoError) or status in (401, 403):
        return GatedModel(spec, f"access denied ({status or 'gated'}): log in or set HF_TOKEN with access")
    if isinstance(exc, RevisionNotFoundError):
        return RevisionNotFound(spec, f"revision {revision!r} does not exist on the Hub")
    if isinstance(exc, RepositoryNotFoundError) or status == 404:
        return ModelNotFound(spec, f"repository {repo_id!r} not found on the Hub (or private)")
    if isinstance(exc, (LocalEntryNotFoundError, OfflineModeIsEnabled)):
        cached = _cached_repo_folder(repo_id)
        if cached.is_dir() and revision:
            return RevisionNotFound(spec, f"revision {revision!r} is not in the local cache {cached.parent}")
        if offline:
            return NetworkUnavailable(spec, f"offline and not in the local cache {constants.HF_HUB_CACHE}")
        return NetworkUnavailable(spec, "the Hub is unreachable and the model is not in the local cache")
    if isinstance(exc, HfHubHTTPError):
        return NetworkUnavailable(spec, f"Hub request failed: {str(exc).splitlines()[0]}")
    return NetworkUnavailable(spec, f"download failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
