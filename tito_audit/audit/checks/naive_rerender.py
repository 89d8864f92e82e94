r"""naive_rerender: does re-rendering the parsed conversation and re-encoding reproduce the buffer?

It compares per episode, and counts the sampled (trainable) tokens an alignment of the two sequences loses. A
divergence also means the logprobs of the sampler and the trainer refer to different sequences.

**Example** (``Qwen/Qwen3-0.6B``, ``single_call/plain``, class ``history_rewrite``): ``re-rendered ids diverge at
token 236; 4 of 35 sampled tokens are lost`` — the sampled ``<think>\n\n</think>\n\n`` (ids 151667 271 151668 271)
is gone from the re-rendered history, which continues with 151657 ``<tool_call>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.audit.episode_cuts import cut_ids, cuts, endings
from tito_audit.audit.simulation import Simulation
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome


@check(
    id="naive_rerender",
    title="Naive re-tokenization is exact",
    severity="warning",
    order=25,
    approximate_classes=True,
    verdict="tito-required",
    explanation="""
Naive rollout code keeps a message list and re-renders plus re-encodes it every turn. This compares that
sequence with the token buffer (prompt + sampled ids + deltas) for canonical tokens. Any divergence means the
gradient lands on tokens that were never sampled and loss masks shift; the number of trainable tokens the
alignment loses is reported per episode. Each episode whose re-render is exact is also cut after every block of
messages the loop appended (an episode that reached its turn limit there), re-rendered without a generation prompt,
and its history before that block compared with the buffer (not where the template refused one of its appends: those
are tool_append_prefix's and history_rewrite's): a template that rewrites the history only while an
appended message is last and no generation prompt is asked fails here; so does one that rewrites it when an episode
ends on a user turn, a system notice or a developer message appended after its final answer.""",
    fix_hint="""
Keep a token buffer (tito_audit.Trajectory): store sampled ids, append deltas, never re-encode the history.""",
)
def naive_rerender(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "naive_rerender")
    stopped = _Stopped()
    episodes = 0
    for sim in ctx.ok_simulations(exclude_tags=("special_text",)):
        traj = sim.trajectory
        if traj is None:
            continue
        episodes += 1
        f = found.compare(
            sim.scenario.id,
            traj.input_ids,
            sim.naive_ids,
            "re-rendering the parsed conversation diverges from the buffer",
            trainable=traj.loss_mask,
        )
        if f and ctx.options.count_lost_tokens:
            sampled = sum(traj.loss_mask)
            f.message = (
                f"re-rendered ids diverge at token {f.index}; {f.affected_trainable} of {sampled} "
                "sampled tokens are lost"
            )
        if f is None:  # where the whole episode diverges, its cuts would show the same history again
            _judge_cuts(ctx, found, sim, stopped)
    for ending in endings(ctx):
        stopped.compared += 1
        finding = found.compare(
            ending.label,
            ending.buffer,
            ending.ids,
            f"re-rendering the episode ended by a {ending.role} message appended after its answer rewrites the history",
            trainable=ending.loss_mask,
        )
        stopped.diverged += finding is not None
    findings = found.findings
    summary = f"exact in {episodes} episodes" + (
        f" and {stopped.compared} ended at messages the loop appended" if stopped.compared else ""
    )
    if findings:
        summary = f"diverges in {len(findings) - stopped.diverged} of {episodes} episodes"
        if stopped.diverged:  # (cuts that all kept the history are counted in ``data``)
            summary += f" and in {stopped.diverged} of {stopped.compared} ended at messages the loop appended"
        summary += f" ({', '.join(sorted({f.cls.replace('_', ' ') for f in findings}))})"
    if stopped.refused:
        summary += f"; the template refuses {stopped.refused} episode(s) cut after appended messages"
    data = {"episodes": episodes, "diverging": len(findings)}
    if stopped.compared:
        data["cuts"] = stopped.compared
    if stopped.refused:
        data["cuts_refused"] = stopped.refused
    return found.outcome(summary, "no episode could be simulated", data)


@dataclass
class _Stopped:
    """The episodes stopped at messages the loop appended (cuts and endings): compared, diverging, and cuts the
    template refuses to render without a generation prompt (a trainer's re-render fails there, loudly)."""

    compared: int = 0
    diverged: int = 0
    refused: int = 0


def _judge_cuts(ctx: AuditContext, found: Collector, sim: Simulation, stopped: _Stopped) -> None:
    """Compare the re-render of ``sim``'s episode cut after each appended block with the buffer's history before
    that block (``episode_cuts``), counted in ``stopped``."""
    traj = sim.trajectory
    assert traj is not None
    for cut in cuts(sim):
        try:
            ids = cut_ids(ctx.renderer, sim, cut)
        except RenderError:
            stopped.refused += 1
            continue
        stopped.compared += 1
        finding = found.compare(
            cut.label(sim.scenario.id),
            traj.input_ids[: cut.history],
            ids[: cut.history],
            "re-rendering the episode cut after the messages the loop appended (a turn limit reached there) "
            "rewrites the history before them",
            trainable=traj.loss_mask[: cut.history],
        )
        stopped.diverged += finding is not None
