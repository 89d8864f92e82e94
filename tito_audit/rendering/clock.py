"""The date templates see: ``strftime_now`` answers from a pinned date, so that runs are reproducible.

Kept apart from the renderer (no jinja2, no transformers) so that the CLI can show the default date cheaply.
"""

from __future__ import annotations

import contextvars
import datetime as dt

DEFAULT_DATE = dt.datetime(2026, 1, 15, 12, 0, 0)
_PINNED_DATE: contextvars.ContextVar[dt.datetime] = contextvars.ContextVar("tito_audit_date", default=DEFAULT_DATE)


def pinned_strftime(fmt: str) -> str:
    """``strftime_now`` for templates: the pinned date, formatted."""
    return _PINNED_DATE.get().strftime(fmt)


class pinned_date:
    """The block renders at ``when``. A class, not a generator: it wraps every render (see ``guard.time_limit``)."""

    __slots__ = ("_token", "when")

    def __init__(self, when: dt.datetime) -> None:
        self.when = when

    def __enter__(self) -> None:
        self._token = _PINNED_DATE.set(self.when)

    def __exit__(self, *exc: object) -> None:
        _PINNED_DATE.reset(self._token)
