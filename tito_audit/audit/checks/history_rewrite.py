"""history_rewrite: earlier turns change when the conversation grows.

Rewrites found: reasoning dropped from earlier turns, tool calls reformatted, turn-end markers changed.

**Example** (``openai/gpt-oss-20b``, ``followup_user/plain``, class ``stop_seam``, first divergent token 207): the
last turn ends with ``<|return|>``, which becomes ``<|end|>`` once a user message follows.

    buffered     ' sunny in Paris.' | 200002 '<|return|>'
    re-rendered  ' sunny in Paris.' | 200007 '<|end|>' 200006 '<|start|>' 1428 'user'

``Qwen/Qwen3-0.6B``, ``single_call/plain``: ``assistant message 1 renders differently once later turns follow``
(the empty think block, as in ``tool_append_prefix``).

A rewrite may last only while some message is last: a template that writes earlier turns otherwise while a system
notice or a user turn it appended with tool results ends the conversation. The final render is then as the buffer
holds it, but the prompt a loop rendered at that turn was not: an episode whose turns all render alike is also
judged at each append the loop made (the ``Trajectory``'s), and an append block that rewrites the history because
of a system or user message in it, not its tool results (``tool_append_prefix``'s), is this check's finding. So is
a rewrite ``append_matrix``'s probes show when a user turn, a system notice or a message of a role the template
names (``developer``) is appended after an answer or after a call (``append_probes``); a probe the template refuses
is an append it never renders, not a failed comparison.

A rewrite a loop's own append meets (the episode's append of a user, system or developer message is refused: the
token buffer cannot take it, ``Trajectory`` refuses it) carries the reason ``rewrites_on_append``, so the verdict
does not say buffer + delta is exact where it is exact only on tool appends: such a message begins a new trained
sequence. A rewrite only a re-render of the whole conversation shows (reasoning dropped from earlier turns while
every append keeps the prefix) is the check's own, ``history_rewrite``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tito_audit.audit.checks.append_matrix import append_probes
from tito_audit.audit.checks.base import check
from tito_audit.audit.checks.tool_append_prefix import append_block, judged_appends
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.audit.other_roles import notice_roles
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.report.verdict import APPEND_REWRITE as APPEND_REASON
from tito_audit.rollout.bridge import BridgeError, assistant_stop_position
from tito_audit.rollout.tokens import common_prefix_len


@check(
    id="history_rewrite",
    title="History is not rewritten",
    severity="warning",
    order=70,
    approximate_classes=True,
    verdict="tito-required",
    explanation="""
Templates drop earlier reasoning, reformat tool calls or change markers once more turns follow. The sampled
tokens of those turns then never appear in a re-rendered conversation: naive rollout code trains on text the
model did not produce, and the objective for rewritten tokens is undefined.""",
    fix_hint="""
Keep the token buffer (never re-render), and treat everything up to the last rewrite as prompt (loss 0) if
you must re-render; or patch the template to keep history stable.""",
)
def history_rewrite(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "history_rewrite")
    for sim in ctx.ok_simulations(exclude_tags=("special_text",)):
        renderer = ctx.renderer_for(sim.scenario)
        tools = list(sim.scenario.tools)
        try:
            final = renderer.render_ids(sim.messages, tools=tools)
            rewritten = False
            refused = _refused_append(ctx, sim)
            for turn in sim.turns[:-1]:
                ids, stop = assistant_stop_position(renderer, sim.messages[: turn.index + 1], tools, ctx.stop_ids)
                prefix = ids[: stop + 1] if stop is not None else ids
                rewritten = common_prefix_len(prefix, final) < len(prefix)
                finding = found.compare(
                    sim.scenario.id,
                    prefix,
                    final[: len(prefix) + 8] if rewritten else prefix,
                    f"assistant message {turn.index} renders differently once later turns follow",
                )
                if finding is not None and refused is not None:
                    finding.reason = APPEND_REASON
                    finding.message += (
                        f" (and the loop's append of {refused.block} after assistant message {refused.index} is "
                        "refused: the buffer cannot take it)"
                    )
                if rewritten:
                    break
            if not rewritten and refused is not None:
                _rewritten_while_last(sim, refused, found)
        except RenderError as err:
            found.failed(sim.scenario.id, err)
    for probe in append_probes(ctx, notice_roles(ctx)):
        if isinstance(probe.outcome, BridgeError):
            error = probe.outcome
            where = probe.base.replace("_", " ")
            finding = found.compare(
                probe.scenario, error.before, error.after, f"appending {probe.role} {where} rewrites the history"
            )
            if finding is not None:
                finding.reason = APPEND_REASON
        elif probe.outcome is None:
            found.compared()
    findings = found.findings
    summary = (
        f"earlier turns render identically ({found.comparisons} turns compared)"
        if not findings
        else (f"history rewritten in {len(findings)} episode(s): {findings[0].cls.replace('_', ' ')}")
    )
    return found.outcome(summary, "no episode has an earlier assistant turn to compare")


@dataclass(frozen=True)
class _Refused:
    """The first append of an episode the buffer refuses because of a system, user or developer message in its block
    (not its tool results: ``tool_append_prefix.judged_appends``): after assistant message ``index``, its roles."""

    index: int
    block: str
    error: BridgeError


def _refused_append(ctx: AuditContext, sim: Any) -> _Refused | None:
    """``_Refused`` of ``sim``, or None; read once per episode (judging an append may render)."""
    for idx, bridge_error, _, error in judged_appends(ctx, sim):
        if error is None:  # (its tool results alone breaking it is tool_append_prefix's finding)
            return _Refused(idx, "+".join(m["role"] for m in append_block(sim.messages, idx)), bridge_error)
    return None


def _rewritten_while_last(sim: Any, refused: _Refused, found: Collector) -> None:
    """The refused append of ``sim`` whose turns all render alike: the history rewritten while the appended system
    or user message is last, as a finding."""
    finding = found.compare(
        sim.scenario.id,
        refused.error.before,
        refused.error.after,
        f"appending {refused.block} after assistant message {refused.index} rewrites the history while it is last",
    )
    if finding is not None:
        finding.reason = APPEND_REASON
