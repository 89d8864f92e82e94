"""time_invariance: renders differ between two dates.

The two dates are the pinned one (``--date``, default 2026-01-15) and one 400 days and 13 hours later. How a
renderer's wall clock is stopped: [renderers.md](../renderers.md), "Dates and the wall clock".

**Example** (``meta-llama/Llama-3.2-3B-Instruct``, ``single_call/plain``, class ``date``, first divergent token 24):
``rendering on 2026-01-15 and 2027-02-20 differs``.

    2026-01-15  15724 'Today' 2696 ' Date' 25 ':' 220 ' ' | 868 '15' 4448 ' Jan' 220 ' ' 2366 '202' 21 '6'
    2027-02-20  15724 'Today' 2696 ' Date' 25 ':' 220 ' ' | 508 '20' 13806 ' Feb' 220 ' ' 2366 '202' 22 '7'
"""

from __future__ import annotations

import datetime as dt

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.engines import wall_clock
from tito_audit.errors import RenderError
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
    other = ctx.renderer.with_date(ctx.options.date + _OTHER_DATE_OFFSET)
    found = Collector(ctx, "time_invariance")
    for sim in ctx.ok_simulations()[:3]:
        tools = list(sim.scenario.tools)
        try:
            a = ctx.renderer_for(sim.scenario).render_ids(sim.messages, tools=tools)
            b = other.with_kwargs(**sim.scenario.kwargs).render_ids(sim.messages, tools=tools)
        except RenderError as err:
            found.failed(sim.scenario.id, err)
            continue
        f = found.compare(
            sim.scenario.id,
            a,
            b,
            f"rendering on {ctx.options.date:%Y-%m-%d} and {(ctx.options.date + _OTHER_DATE_OFFSET):%Y-%m-%d} differs",
            cls="date",
        )
        if f:
            break
    if not found.findings and not ctx.engine.is_template and not wall_clock.available():
        return Outcome(
            not_applicable=f"renderer {ctx.engine.name} renders alike at both dates, but the wall clock its code may "
            "read could not be stopped (pip install 'tito-audit[encoders]', time-machine): not checked",
            comparisons=found.comparisons,
            render_failures=found.render_failures,
        )
    summary = (
        f"independent of the date ({found.comparisons} episodes)" if not found.findings else found.findings[0].message
    )
    return found.outcome(summary, "no episode renders at both dates")
