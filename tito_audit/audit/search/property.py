"""The property the search looks for counterexamples to, exactly as the checks define it.

A conversation is played through the audit's own simulator (``audit.simulation.simulate``: the template stands in
for the model, the token buffer appends each delta, naive code re-renders the whole conversation), and breaks the
property in one of three ways, each outranking the next:

- ``APPEND``: appending the tool results of a call turn rewrites the history, so no token delta is exact
  (``tool_append_prefix``'s finding; the verdict is then ``unsafe``), or the engine's stop cuts the turn before
  calls that are not merely later parallel ones (its stop seam);
- ``LOST``: a tool call, a tool result or an argument value the conversation sends is not rendered where the model
  is shown it (``tool_support``'s findings, read by its own code: ``tool_support.lost_values``; the verdict is then
  ``unsafe``). Red team 44: a template that rounds a float argument, keeps an array's first object or strips tags
  from a result on every turn alike breaks no render against another, so only this reading finds it, and only in
  a conversation that holds the value;
- ``RERENDER``: re-rendering the parsed conversation and re-encoding it departs from the buffer
  (``naive_rerender``'s), or an append rewrites the history because of a system or user message in it, not its
  tool results (``history_rewrite``'s finding at that append: a loop that re-renders at that turn departs from the
  buffer there, though the final re-render, where that message is no longer last, may not), or the re-render of the
  episode cut after its last appended block (a turn limit reached there) departs from the buffer before it
  (``naive_rerender``'s cuts, which judge every block of the scenarios, ``audit.episode_cuts``); the verdict is then
  at least ``tito-required``.

The verdict is never decided here: a counterexample joins the audit's scenarios and the checks judge it like any
other (``audit.search``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tito_audit.audit.checks.tool_append_prefix import judged_appends
from tito_audit.audit.checks.tool_support import lost_values
from tito_audit.audit.episode_cuts import rewritten_cut
from tito_audit.audit.simulation import Simulation, simulate
from tito_audit.errors import InternalError, RenderError
from tito_audit.rollout.payloads import only_later_calls

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext
    from tito_audit.scenarios.searched import Conversation

APPEND = "append"
LOST = "lost"
RERENDER = "rerender"
KINDS = (APPEND, LOST, RERENDER)  # the stronger first
UNSAFE_KINDS = (APPEND, LOST)  # a counterexample of these makes the verdict ``unsafe``: nothing outranks it
TOKEN_KINDS = (APPEND, RERENDER)  # those the trained tokens show (``tito-audit rl``'s)


@dataclass
class Played:
    """A conversation played: how it breaks the property (None: it holds, or the template refused it)."""

    kind: str | None
    simulation: Simulation


def play(ctx: AuditContext, conversation: Conversation, sid: str, every_cut: bool = False) -> Played:
    """``conversation`` played as scenario ``sid`` in the shape the template accepts (``AuditContext.shapes``);
    ``every_cut``: judged cut after each appended block, not the last only (``kind_of``). Raises ``InternalError``
    where our code or a library's fails (never a template's doing)."""
    try:
        sim = simulate(ctx.renderer, conversation.scenario(sid), ctx.stop_ids, ctx.shapes)
    except InternalError:
        raise
    except Exception as exc:  # our code failed on a drawn conversation: never the template's doing
        raise InternalError(f"{type(exc).__name__}: {exc} (playing a searched conversation)") from exc
    if sim.internal is not None:
        raise sim.internal
    return Played(kind_of(ctx, sim, every_cut), sim)


def judged(played: Played) -> bool:
    """Whether the property was judged on the conversation: the template rendered it and a canonical sample exists
    (no token spans prompt and completion: that seam is stop_boundary's). Template coverage counts only these."""
    sim = played.simulation
    return sim.ok and sim.trajectory is not None and not any(t.seam_merged for t in sim.turns)


def kind_of(ctx: AuditContext, sim: Simulation, every_cut: bool = False) -> str | None:
    """How ``sim`` breaks the property (``APPEND`` before ``RERENDER``), or None. An append break is one the tool
    results alone make (``tool_append_prefix.judged_appends``): a rewrite a system or user message appended
    with them causes (or without them) is ``history_rewrite``'s, a ``RERENDER``, and the append of the turn sampled
    after it is not judged (``tool_append_prefix.judged_appends``: that turn was read off the rewritten prompt). The
    episode is judged cut after its last appended block, or after each with ``every_cut`` (the sweeps': a value they
    hold in one block only is met where the episode is cut after that block)."""
    if not judged(Played(None, sim)) or sim.trajectory is None:
        return None  # refused, or no canonical sample (a token spans prompt and completion: stop_boundary's)
    rewritten = False  # an append a system or user message in it breaks: history_rewrite's (judged last)
    for idx, _, _, error in judged_appends(ctx, sim):
        if error is None:
            rewritten = True
        elif error.inside_turn is None or not only_later_calls(sim.messages[idx], error.inside_turn):
            return APPEND
    if "tool" in sim.scenario.tags and _lost(ctx, sim):
        return LOST
    if rewritten or list(sim.trajectory.input_ids) != list(sim.naive_ids):
        return RERENDER
    return RERENDER if rewritten_cut(ctx.renderer, sim, last_only=not every_cut) is not None else None


def _lost(ctx: AuditContext, sim: Simulation) -> bool:
    """Whether ``sim`` loses tool traffic where the model is shown it (``tool_support.lost_values``, its first
    finding only); a whole conversation that does not render is judged by the others (``history_rewrite``)."""
    try:
        return next(lost_values(ctx, sim, screen=True), None) is not None
    except RenderError:
        return False
