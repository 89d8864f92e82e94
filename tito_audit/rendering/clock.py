"""The date templates see: ``strftime_now`` answers from a pinned date, so that runs are reproducible.

Kept apart from the renderer (no jinja2, no transformers) so that the CLI can show the default date cheaply.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import re

DEFAULT_DATE = dt.datetime(2026, 1, 15, 12, 0, 0)
_PINNED_DATE: contextvars.ContextVar[dt.datetime] = contextvars.ContextVar("tito_audit_date", default=DEFAULT_DATE)
_READS: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("tito_audit_clock_reads", default=None)
# strftime directives whose value changes within a day (hour, minute, second, AM/PM, microseconds, the time or the
# whole timestamp), with or without a padding flag ('%-H')
_WITHIN_DAY = re.compile(r"%[-_0^#]?[HIMSpPfXcrTRkls]")


def pinned_strftime(fmt: str) -> str:
    """``strftime_now`` for templates: the pinned date, formatted (the format recorded where reads are asked for)."""
    reads = _READS.get()
    if reads is not None:
        reads.add(str(fmt))
    return _PINNED_DATE.get().strftime(fmt)


class clock_reads:
    """The ``strftime_now`` formats the renders inside the block asked for (``formats``); ``within_day``: those
    whose value changes within a day (the template reads the time of day, not only the date)."""

    __slots__ = ("_token", "formats")

    def __init__(self) -> None:
        self.formats: set[str] = set()

    def __enter__(self) -> clock_reads:
        self._token = _READS.set(self.formats)
        return self

    def __exit__(self, *exc: object) -> None:
        _READS.reset(self._token)

    @property
    def within_day(self) -> list[str]:
        return sorted(f for f in self.formats if _WITHIN_DAY.search(f.replace("%%", "")))


class pinned_date:
    """The block renders at ``when``. A class, not a generator: it wraps every render (see ``guard.time_limit``)."""

    __slots__ = ("_token", "when")

    def __init__(self, when: dt.datetime) -> None:
        self.when = when

    def __enter__(self) -> None:
        self._token = _PINNED_DATE.set(self.when)

    def __exit__(self, *exc: object) -> None:
        _PINNED_DATE.reset(self._token)
