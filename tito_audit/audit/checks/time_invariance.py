"""time_invariance: renders differ between two dates.

The two dates are the pinned one (``--date``, default 2026-01-15) and one 400 days and 13 hours later. How a
renderer's wall clock is stopped: [renderers.md](../renderers.md), "Dates and the wall clock".

**The rule for dates.** A template that prints only the date is judged at the pinned date: every render of the
audit sees the same day, the verdict does not move, and this check warns. A rollout that crosses midnight still
re-renders another date, which is what the warning is for. What changes within a day is ``time_of_day``'s, and it
moves the verdict.

**Example** (``meta-llama/Llama-3.2-3B-Instruct``, ``single_call/plain``, class ``date``, first divergent token 24):
``rendering on 2026-01-15 and 2027-02-20 differs``.

    2026-01-15  15724 'Today' 2696 ' Date' 25 ':' 220 ' ' | 868 '15' 4448 ' Jan' 220 ' ' 2366 '202' 21 '6'
    2027-02-20  15724 'Today' 2696 ' Date' 25 ':' 220 ' ' | 508 '20' 13806 ' Feb' 220 ' ' 2366 '202' 22 '7'
"""

from __future__ import annotations

import datetime as dt

from tito_audit.audit.checks.base import check
from tito_audit.audit.clock_renders import clock_not_stopped, compare_at, first_episodes
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.report.findings import Outcome

_OTHER_DATE_OFFSET = dt.timedelta(days=400, hours=13)


@check(
    id="time_invariance",
    title="Rendering does not depend on the date",
    severity="warning",
    order=80,
    explanation="""
Templates that call `strftime_now` inject today's date. A prompt rendered at rollout time and re-rendered at
training time (or on another day, or in another time zone) differs, so cached prompt ids, bridges and
re-rendered histories disagree across days. A renderer other than a template (`--renderer`) is given each date
and renders with Python's wall clock stopped at it, so one that reads the clock itself is caught too; where the
clock cannot be stopped (time-machine not installed), a renderer that agrees at both dates is not checked.""",
    fix_hint="""
Pass the date explicitly (`date_string` or the template's own variable) from the rollout, and keep prompt
ids from the buffer instead of re-rendering.""",
)
def time_invariance(ctx: AuditContext) -> Outcome:
    later = ctx.options.date + _OTHER_DATE_OFFSET
    found = Collector(ctx, "time_invariance")
    message = f"rendering on {ctx.options.date:%Y-%m-%d} and {later:%Y-%m-%d} differs"
    compare_at(ctx, found, later, message, first_episodes(ctx), with_prompt=False)
    not_checked = clock_not_stopped(ctx, found, "dates")
    if not_checked is not None:
        return not_checked
    summary = (
        f"independent of the date ({found.comparisons} episodes)" if not found.findings else found.findings[0].message
    )
    return found.outcome(summary, "no episode renders at both dates")
