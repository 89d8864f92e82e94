"""time_of_day: renders differ between two times of the same day (a template that prints the clock)."""

from __future__ import annotations

import datetime as dt

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.engines import wall_clock
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome


def other_time(when: dt.datetime) -> dt.datetime:
    """``when``'s day at another time: its hour in the other half of the day, its minute and its second other
    ones too (12:00:00 -> 00:29:31), so that a template printing any field of the time renders differently."""
    return when.replace(hour=(when.hour + 12) % 24, minute=(when.minute + 29) % 60, second=(when.second + 31) % 60)


@check(
    id="time_of_day",
    title="Rendering does not depend on the time of day",
    severity="warning",
    order=85,
    verdict="tito-required",
    explanation="""
A template that prints the time of day (`strftime_now('%H:%M')`, seconds, AM/PM) renders differently a minute
later: the prompt a rollout rendered is not what a re-render at training time (or at the next turn) gives, so
naive re-rendering never reproduces the buffer, whatever else the template does. Unlike the date, which the audit
pins (`--date`) and `time_invariance` reports, the time of day changes within every episode, so it makes the
verdict at least `tito-required`. Compared on the same day at two times whose hour, minute, second and half of the
day all differ; a renderer other than a template is given each time with Python's wall clock stopped at it.""",
    fix_hint="""
Keep the token buffer (the prompt ids of the rollout), or pass the time explicitly as a template variable and
keep it fixed for the episode; do not let the template read the clock.""",
)
def time_of_day(ctx: AuditContext) -> Outcome:
    later = other_time(ctx.options.date)
    other = ctx.renderer.with_date(later)
    found = Collector(ctx, "time_of_day")
    for sim in ctx.ok_simulations()[:3]:
        tools = list(sim.scenario.tools)
        # the episode, and the prompt of its last turn (a template may print the time in its generation prompt)
        last = max(i for i, m in enumerate(sim.messages) if m["role"] == "assistant")
        renders = ((sim.messages, False), (sim.messages[:last], True))
        try:
            now, then = ctx.renderer_for(sim.scenario), other.with_kwargs(**sim.scenario.kwargs)
            a = [i for ms, agp in renders for i in now.render_ids(ms, tools=tools, add_generation_prompt=agp)]
            b = [i for ms, agp in renders for i in then.render_ids(ms, tools=tools, add_generation_prompt=agp)]
        except RenderError as err:
            found.failed(sim.scenario.id, err)
            continue
        f = found.compare(
            sim.scenario.id,
            a,
            b,
            f"rendering at {ctx.options.date:%H:%M:%S} and at {later:%H:%M:%S} on the same day differs: the "
            "template prints the time of day",
            cls="date",
        )
        if f:
            break
    if not found.findings and not ctx.engine.is_template and not wall_clock.available():
        return Outcome(
            not_applicable=f"renderer {ctx.engine.name} renders alike at both times, but the wall clock its code "
            "may read could not be stopped (pip install 'tito-audit[encoders]', time-machine): not checked",
            comparisons=found.comparisons,
            render_failures=found.render_failures,
        )
    summary = (
        f"independent of the time of day ({found.comparisons} episodes)"
        if not found.findings
        else found.findings[0].message
    )
    return found.outcome(summary, "no episode renders at both times")
