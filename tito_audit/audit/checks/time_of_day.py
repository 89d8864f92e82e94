"""time_of_day: renders differ between two times of the same day (a template that prints the clock).

The pinned time is ``--date``'s (default 2026-01-15 12:00:00); the other is 00:29:31 the same day. A date alone
renders the same at both times (``time_invariance`` reports it). Each shape is compared with its last turn's prompt
too: a generation prompt may be the only place the time is written. Where a renderer's clock cannot be stopped and
both renders agree, the check says it could not check (``not_applicable``, so the verdict is ``error``), never
``pass``. Buffer + delta still holds (the delta is computed from two renders made together), hence
``tito-required`` and not ``unsafe``.

**Example** (``meta-llama/Llama-3.2-3B-Instruct``: ``independent of the time of day (2 episodes)``; it prints only
the date, which ``time_invariance`` reports). A template of ours that writes ``Current time: {{
strftime_now('%H:%M') }}`` (``tests/data/clock/prints_time_of_day.jinja``, on Qwen2.5's tokenizer),
``single_call/plain``, class ``date``: ``rendering at 12:00:00 and at 00:29:31 on the same day differs: the template
prints the time of day``.

    12:00:00  5405 'Current' 882 ' time' 25 ':' 220 ' ' | 16 '1' 17 '2' 25 ':' 15 '0'
    00:29:31  5405 'Current' 882 ' time' 25 ':' 220 ' ' | 15 '0' 15 '0' 25 ':' 17 '2'
"""

from __future__ import annotations

import datetime as dt

from tito_audit.audit.checks.base import check
from tito_audit.audit.clock_renders import clock_not_stopped, compare_at, one_per_shape
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.rendering.clock import clock_reads
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
A template that prints the time of day (`strftime_now('%H:%M')`, the second, AM/PM) renders differently a minute
later: the prompt a rollout rendered is not what a re-render at training time (or at the next turn) gives, so
naive re-rendering never reproduces the buffer, whatever else the template does. Unlike the date, which the audit
pins (`--date`) and `time_invariance` reports, the time of day changes within every episode, so it makes the
verdict at least `tito-required`. Compared on the same day at two times whose hour, minute, second and half of the
day all differ, on one played episode per shape (the roles it has, the template kwargs it is played under); a
renderer other than a template is given each time with Python's wall clock stopped at it.""",
    fix_hint="""
Keep the token buffer (the prompt ids of the rollout), or pass the time explicitly as a template variable and
keep it fixed for the episode; do not let the template read the clock.""",
)
def time_of_day(ctx: AuditContext) -> Outcome:
    later = other_time(ctx.options.date)
    found = Collector(ctx, "time_of_day")
    message = (
        f"rendering at {ctx.options.date:%H:%M:%S} and at {later:%H:%M:%S} on the same day differs: the template "
        "prints the time of day"
    )
    episodes = one_per_shape(ctx)
    with clock_reads() as reads:
        compare_at(ctx, found, later, message, episodes, with_prompt=True)
    if not found.findings and reads.within_day:
        # renders alike at the two times, but the template reads the time of day (strftime_now('%I'), a minute
        # compared in a test...): another time of day may render otherwise, so a re-render never proves the buffer
        shown = ", ".join(repr(f) for f in reads.within_day[:3])
        found.add(
            episodes[0].scenario.id,
            "date",
            f"the template reads the time of day (strftime_now({shown})): renders at "
            f"{ctx.options.date:%H:%M:%S} and {later:%H:%M:%S} agree, but one at another time of day may not",
        )
    not_checked = clock_not_stopped(ctx, found, "times")
    if not_checked is not None:
        return not_checked
    summary = (
        f"independent of the time of day ({found.comparisons} episodes)"
        if not found.findings
        else found.findings[0].message
    )
    return found.outcome(summary, "no episode renders at both times")
