"""Played episodes rendered at two instants, for the checks that ask whether a template reads the clock
(``time_invariance``: two dates; ``time_of_day``: two times of one day).

A template reads the clock only through ``strftime_now``, which renders the renderer's pinned instant; a renderer
other than a template is given each instant with Python's wall clock stopped at it (``engines.wall_clock``). Where
that clock cannot be stopped and both renders agree, nothing was checked, and the checks say so.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.audit.simulation import Simulation
from tito_audit.engines import wall_clock
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome


def first_episodes(ctx: AuditContext) -> list[Simulation]:
    """The first three played episodes."""
    return ctx.ok_simulations()[:3]


def one_per_shape(ctx: AuditContext) -> list[Simulation]:
    """One played episode per shape: the roles its messages have and the template kwargs it is played under (a
    template may print the clock only in a system message, or only with reasoning on)."""
    seen: dict[tuple[Any, ...], Simulation] = {}
    for sim in ctx.ok_simulations():
        shape = (frozenset(m["role"] for m in sim.messages), tuple(sorted(sim.scenario.kwargs.items(), key=str)))
        seen.setdefault(shape, sim)
    return list(seen.values())


def compare_at(
    ctx: AuditContext,
    found: Collector,
    later: dt.datetime,
    message: str,
    episodes: Sequence[Simulation],
    with_prompt: bool,
) -> None:
    """``episodes`` rendered at the audit's instant and at ``later``, compared token for token, up to the first that
    differs (a finding of class ``date`` with ``message``): each episode, and with ``with_prompt`` its last turn's
    prompt too (a template may write the clock only in its generation prompt)."""
    other = ctx.renderer.with_date(later)
    for sim in episodes:
        tools = list(sim.scenario.tools)
        renders = [(sim.messages, False)]
        if with_prompt:
            last = max(i for i, m in enumerate(sim.messages) if m["role"] == "assistant")
            renders.append((sim.messages[:last], True))
        try:
            now, then = ctx.renderer_for(sim.scenario), other.with_kwargs(**sim.scenario.kwargs)
            a = [i for ms, agp in renders for i in now.render_ids(ms, tools=tools, add_generation_prompt=agp)]
            b = [i for ms, agp in renders for i in then.render_ids(ms, tools=tools, add_generation_prompt=agp)]
        except RenderError as err:
            found.failed(sim.scenario.id, err)
            continue
        if found.compare(sim.scenario.id, a, b, message, cls="date"):
            return


def clock_not_stopped(ctx: AuditContext, found: Collector, both: str) -> Outcome | None:
    """``not_applicable`` where the renders at ``both`` instants agree but the renderer's code may read a wall clock
    that could not be stopped (a library or encoder without time-machine): not checked, never a pass."""
    if found.findings or ctx.engine.is_template or wall_clock.available():
        return None
    return Outcome(
        not_applicable=f"renderer {ctx.engine.name} renders alike at both {both}, but the wall clock its code may "
        "read could not be stopped (pip install 'tito-audit[encoders]', time-machine): not checked",
        comparisons=found.comparisons,
        render_failures=found.render_failures,
    )
