r"""delta_context: a delta computed from a minimal dummy context equals the one from the real context.

The dummy context is ``[user "dummy", assistant]``; the real one is the episode's history.

**Example** (``deepseek-ai/DeepSeek-V3``, ``two_calls/plain``, class ``whitespace``, first divergent token 0): a
second tool result inside one tool-output group is rendered as a continuation; from a dummy context it opens a new
group.

    real context   | 201 '\n' 128812 '<｜tool▁output▁begin｜>' 31704 'Sun'
    dummy context  | 128810 '<｜tool▁outputs▁begin｜>' 128812 '<｜tool▁output▁begin｜>' 31704 'Sun'
"""

from __future__ import annotations

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.rollout.bridge import BridgeError, compute_bridge


@check(
    id="delta_context",
    title="Delta independent of context",
    severity="warning",
    order=50,
    explanation="""
Frameworks often compute the tool-result suffix once, from a dummy conversation (TRL's GRPO does), and reuse
it for every episode. That is only right when the template renders the appended messages the same whatever
came before (Qwen groups consecutive tool messages into one user block, so a second result depends on the first).""",
    fix_hint="""
Compute each bridge from the episode's real message history (tito_audit.Trajectory does), not from a cached
dummy suffix.""",
)
def delta_context(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "delta_context")
    for sim in ctx.ok_simulations(exclude_tags=("special_text",)):
        traj = sim.trajectory
        if traj is None or sim.bridge_errors:
            continue
        renderer = ctx.renderer_for(sim.scenario)
        tools = list(sim.scenario.tools)
        bridges = iter(traj.bridges)
        assistants = [i for i, m in enumerate(sim.messages) if m["role"] == "assistant"]
        for n, idx in enumerate(assistants):
            nxt = assistants[n + 1] if n + 1 < len(assistants) else len(sim.messages)
            if nxt <= idx + 1:
                continue
            real = next(bridges, None)
            if real is None:
                break
            dummy_history = [{"role": "user", "content": "dummy"}, sim.messages[idx]]
            try:
                dummy = compute_bridge(renderer, dummy_history, sim.messages[idx + 1 : nxt], tools, ctx.stop_ids)
            except BridgeError:
                continue  # the dummy context itself rewrites: no dummy delta exists to compare
            except RenderError as err:
                found.failed(sim.scenario.id, err)
                continue
            found.compare(
                sim.scenario.id,
                real.ids,
                dummy.ids,
                f"the delta after assistant message {idx} differs when computed from a dummy context",
            )
    findings, compared = found.findings, found.comparisons
    return found.outcome(
        f"{compared} deltas identical from a dummy context"
        if not findings
        else f"{len(findings)} of {compared} deltas depend on the real context",
        "no episode has a computable delta",
    )
