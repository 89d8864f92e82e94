"""Worker processes and Ctrl-C, shared by every command that runs work in parallel (``audit``, ``scan``,
``replay``): one pool (``pool``) and one interrupt mark (``interrupt``). A foundation: it imports nothing else of
tito_audit."""

from __future__ import annotations

from tito_audit.workers.pool import (
    Died,
    Done,
    Ended,
    Event,
    Killed,
    Raised,
    RemoteError,
    Told,
    WorkerPool,
    default_jobs,
    reraise,
    tell,
)

__all__ = [
    "Died",
    "Done",
    "Ended",
    "Event",
    "Killed",
    "Raised",
    "RemoteError",
    "Told",
    "WorkerPool",
    "default_jobs",
    "reraise",
    "tell",
]
