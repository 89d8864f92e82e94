"""Episodes cut after the messages a loop appended: what a trainer re-renders when an episode ends at its turn limit.

A rollout loop appends tool results (or a user turn, a notice) with the generation prompt and samples again. An
episode that reaches its turn limit there ends on those messages, and naive trainer code re-renders it as it is:
without a generation prompt, the appended messages last. A template can write the history differently in that
render only (it tests ``messages[-1].role`` and ``add_generation_prompt`` together), and no full episode shows it:
every scenario ends on an answer. So each simulated episode is also cut after each block the loop appended, and the
re-render of the cut is compared with the buffer up to that block: the history the trainer must see unchanged. What
follows (the block itself and the generation prompt the loop asked for) is untrained and is rendered differently
without a generation prompt by design; it is not compared.

An episode may also end on a message the loop appended after its final answer (a notice that the turn limit was
reached, a user turn never answered): ``endings`` appends each message a loop sends to say something (a user turn, a
system notice, a ``developer`` message where the template names one) to an exact episode with a tool call in each
thinking mode, renders it without a generation prompt, and compares it with the episode's buffer.

``naive_rerender`` judges the cuts of every episode whose full re-render is exact and the endings, the counterexample
search counts a cut that diverges as a re-render break (``search.property``), and ``tito-audit rl`` adds the first cut
of an episode that diverges, and each ending that does, to its token facts, so that none says "exact" or "identical"
where a cut is not. A cut or an ending the template refuses to render is no silent rewrite (naive code fails there,
loudly): ``naive_rerender`` names the refused cuts, the search and ``rl`` pass them over.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tito_audit.audit.other_roles import notice_roles
from tito_audit.errors import RenderError
from tito_audit.scenarios.spec import Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext
    from tito_audit.audit.simulation import Simulation
    from tito_audit.rendering.renderer import Renderer


@dataclass(frozen=True)
class Cut:
    """An episode cut after one appended block: its first ``messages`` messages, and the ``history`` buffer ids
    before that block."""

    messages: int
    history: int

    def label(self, scenario_id: str) -> str:
        """The finding's scenario: the episode and where it was cut."""
        return f"{scenario_id} cut after message {self.messages}"


def cuts(sim: Simulation) -> list[Cut]:
    """Where ``sim``'s episode can end at a turn limit: after each non-empty block of messages the loop appended
    (a generation prompt alone, between two assistant turns, is no place a loop stops). None for an episode whose
    appends the template refused (``tool_append_prefix`` and ``append_matrix`` judge those)."""
    traj = sim.trajectory
    if traj is None or sim.bridge_errors:
        return []
    out: list[Cut] = []
    for seg in traj.segments:
        # a bridge segment is pushed after its messages joined the trajectory: ``seg.messages`` counts them, and the
        # last of them is the assistant turn where the block was empty
        last = sim.messages[seg.messages - 1] if 0 < seg.messages < len(sim.messages) else None
        if seg.kind == "bridge" and last is not None and last.get("role") != "assistant":
            out.append(Cut(seg.messages, seg.start))
    return out


def cut_ids(renderer: Renderer, sim: Simulation, cut: Cut) -> list[int]:
    """The naive re-render of ``sim``'s episode cut at ``cut``: rendered without a generation prompt, encoded (raises
    ``RenderError`` where the template refuses it)."""
    r = renderer.with_kwargs(**sim.scenario.kwargs) if sim.scenario.kwargs else renderer
    return r.encode(r.render(sim.messages[: cut.messages], tools=list(sim.scenario.tools)))


def rewritten_cut(renderer: Renderer, sim: Simulation, last_only: bool = False) -> Cut | None:
    """The first cut of ``sim``'s episode whose re-render departs from the buffer before its block, or None (a cut the
    template refuses to render is not one: ``naive_rerender`` names those). ``last_only``: the last cut alone,
    the one with the most history (the search's: each cut renders the conversation up to it, and a long episode's
    every cut would spend its render budget on one conversation)."""
    traj = sim.trajectory
    if traj is None:
        return None
    found = cuts(sim)
    for cut in found[-1:] if last_only else found:
        try:
            ids = cut_ids(renderer, sim, cut)
        except RenderError:
            continue
        if ids[: cut.history] != traj.input_ids[: cut.history]:
            return cut
    return None


@dataclass(frozen=True)
class Ending:
    """An episode that ends on a ``role`` message appended after its final answer, re-rendered without a generation
    prompt: its buffer (every sampled turn in it) and that re-render's ids over the buffer's length."""

    scenario: str
    role: str
    buffer: list[int]
    loss_mask: list[int]
    ids: list[int]
    messages: list[Message]  # the episode's, and the message that ends it
    tools: list[dict[str, Any]]

    @property
    def label(self) -> str:
        return f"{self.scenario} ended by a {self.role} message"


def endings(ctx: AuditContext) -> list[Ending]:
    """The first exact episode with a tool call in each thinking mode, ended by each message a loop appends to say
    something (see the module docstring), re-rendered without a generation prompt; an ending the template refuses
    to render is not one a trainer re-renders, and is left out."""
    out: list[Ending] = []
    modes: set[str] = set()
    for sim in ctx.ok_simulations(exclude_tags=("special_text",)):
        traj = sim.trajectory
        mode = repr(sorted(sim.scenario.kwargs.items()))
        if traj is None or sim.bridge_errors or mode in modes or traj.input_ids != sim.naive_ids:
            continue
        if not any(m.get("tool_calls") for m in sim.messages):
            continue
        modes.add(mode)
        renderer, tools = ctx.renderer_for(sim.scenario), list(sim.scenario.tools)
        for role in notice_roles(ctx):
            ended = [*sim.messages, {"role": role, "content": "Turn limit reached."}]
            try:
                ids = renderer.encode(renderer.render(ended, tools=tools))
            except RenderError:
                continue
            # where the template writes a turn's stop only once the conversation goes on (the next turn's opener,
            # GLM's), the final turn's stop is the opener of what follows, as at every append (the simulator's
            # convention): the ending's, compared as the appended message's own, not as history
            n = len(traj.input_ids) - (1 if sim.turns and sim.turns[-1].stop_deferred else 0)
            buffer, mask = list(traj.input_ids[:n]), list(traj.loss_mask[:n])
            out.append(Ending(sim.scenario.id, role, buffer, mask, ids[:n], ended, tools))
    return out
