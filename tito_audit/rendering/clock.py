"""The date templates see: ``strftime_now`` answers from a pinned date, so that runs are reproducible.

Kept apart from the renderer (no jinja2, no transformers) so that the CLI can show the default date cheaply.
"""

from __future__ import annotations

import contextvars
import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_DATE = dt.datetime(2026, 1, 15, 12, 0, 0)
_PINNED_DATE: contextvars.ContextVar[dt.datetime] = contextvars.ContextVar("tito_audit_date", default=DEFAULT_DATE)


def pinned_strftime(fmt: str) -> str:
    """``strftime_now`` for templates: the pinned date, formatted."""
    return _PINNED_DATE.get().strftime(fmt)


@contextmanager
def pinned_date(when: dt.datetime) -> Iterator[None]:
    token = _PINNED_DATE.set(when)
    try:
        yield
    finally:
        _PINNED_DATE.reset(token)
