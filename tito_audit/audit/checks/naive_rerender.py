r"""naive_rerender: does re-rendering the parsed conversation and re-encoding reproduce the buffer?

It compares per episode, and counts the sampled (trainable) tokens an alignment of the two sequences loses. A
divergence also means the logprobs of the sampler and the trainer refer to different sequences.

**Example** (``Qwen/Qwen3-0.6B``, ``single_call/plain``, class ``history_rewrite``): ``re-rendered ids diverge at
token 236; 4 of 35 sampled tokens are lost`` — the sampled ``<think>\n\n</think>\n\n`` (ids 151667 271 151668 271)
is gone from the re-rendered history, which continues with 151657 ``<tool_call>``.
"""

from __future__ import annotations

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
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
alignment loses is reported per episode.""",
    fix_hint="""
Keep a token buffer (tito_audit.Trajectory): store sampled ids, append deltas, never re-encode the history.""",
)
def naive_rerender(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "naive_rerender")
    for sim in ctx.ok_simulations(exclude_tags=("special_text",)):
        traj = sim.trajectory
        if traj is None:
            continue
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
    findings, episodes = found.findings, found.comparisons
    summary = (
        f"exact in {episodes} episodes"
        if not findings
        else (
            f"diverges in {len(findings)} of {episodes} episodes "
            f"({', '.join(sorted({f.cls.replace('_', ' ') for f in findings}))})"
        )
    )
    return found.outcome(summary, "no episode could be simulated", {"episodes": episodes, "diverging": len(findings)})
