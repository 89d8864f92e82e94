"""The wall clock a renderer's Python code sees, stopped at the audit's pinned date while it renders.

A chat template reads the date only through ``strftime_now``, which the audit pins (``rendering.clock``). A library
or a Python encoder can read the clock itself (``datetime.date.today()``, ``time.strftime``): its renders would
then hold the day the audit ran, and ``time_invariance`` could not see it. While an engine renders, ``time-machine``
(the ``engines`` extra) moves Python's clock (``time.time``, ``datetime.now``/``today``, ``time.localtime``...) to
the render's date and stops it there, so every render is of its pinned date, and renders at two dates differ where
the code reads the clock. Native code that asks the operating system for the time directly is not covered.
Without time-machine the clock runs: ``available()`` is False and ``time_invariance`` says, for such a renderer,
that it could not check.
"""

from __future__ import annotations

import datetime as dt
from contextlib import AbstractContextManager, nullcontext
from functools import cache
from typing import Any


@cache
def available() -> bool:
    try:
        import time_machine  # noqa: F401
    except ImportError:
        return False
    return True


def stopped_at(when: dt.datetime) -> AbstractContextManager[Any]:
    """Python's wall clock at ``when``, not moving, for the block; the running clock where time-machine is missing."""
    if not available():
        return nullcontext()
    import time_machine

    return time_machine.travel(when, tick=False)
