"""tool_forms: tool calls dropped only in a form other than the canonical one (content "", parallel calls).

The forms: the assistant ``content`` ``""`` (probed) or text next to the calls, and every call of a parallel pair
but the first (played). The verdict line carries ``avoid ...`` with the form (``verdict_reasons``:
``avoid:tool_calls_with_empty_content``, ``avoid:parallel_calls``; ``avoid:parallel_calls_per_turn`` where the
template writes each parallel call as a turn of its own).

**Example** (``openai/gpt-oss-20b``, ``parallel_calls/plain``): ``parallel tool call #2 (search_docs) of 2 in
assistant message 1 is not rendered`` — the template prints only ``message.tool_calls[0]``, so a model that emits
two calls in one turn loses the second from every re-rendered context.
"""

from __future__ import annotations

from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.checks.tool_support import call_form, dropped_message, missing_arguments, string_form
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.rollout.payloads import only_later_calls


def _string_arguments_dropped(ctx: AuditContext, sim: Any, found: Collector) -> None:
    """Argument values a template drops only where they come as a JSON string (it reads them as a mapping): a
    loop that sends OpenAI's string arguments trains on calls without them."""
    renderer, tools = ctx.renderer_for(sim.scenario), list(sim.scenario.tools)
    try:
        full = renderer.render(sim.messages, tools=tools)
    except RenderError:
        return
    for i, value in missing_arguments(sim, renderer, full, tools):
        found.add(
            sim.scenario.id,
            "serialization",
            f"argument value {value!r} of message {i} is not rendered when the arguments are a JSON string",
            reason="arguments_string",
        )


@check(
    id="tool_forms",
    title="Tool calls in other forms",
    severity="warning",
    order=12,
    verdict="caveat",
    explanation="""
Some templates render tool calls in their canonical form but drop them in another one: only when `content` is
`""` (or text) next to the calls, or every call of a parallel pair but the first. The verdict stands, but rollouts that
produce that form train on calls the model never sees: the verdict line names the form to avoid. A template that
writes each of parallel calls as a turn of its own, closed by the stop (harmony's `<|call|>`), has an engine
sample them one per turn: a parallel message is a form its rollouts never produce.""",
    fix_hint="""
Avoid the named form in rollouts (send `content` None next to tool calls; one call per assistant turn), or
patch the template to render it.""",
)
def tool_forms(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "tool_forms")
    shapes = ctx.shapes
    if shapes.rejects_tools is not None or "tool_calls" in shapes.drops:
        return Outcome(not_applicable="tool calls do not render in the canonical form (tool_support)")
    found.compared()  # the content "" probe
    if shapes.empty_content_drops:
        found.add(
            "probe/content_empty",
            "template",
            'tool calls are not rendered when the assistant content is "" (they are with content None)',
            reason="tool_calls_with_empty_content",
        )
    for sim in ctx.ok_simulations():
        for turn in sim.turns:
            if not sim.messages[turn.index].get("tool_calls"):
                continue
            found.compared()
            message = sim.messages[turn.index]
            form = call_form(message, turn.dropped_calls, shapes.canonical_content) if turn.tool_calls_dropped else None
            if form is not None:
                found.add(sim.scenario.id, "template", dropped_message(sim.messages, turn), reason=form)
            elif turn.cut_text and only_later_calls(message, turn.cut_text):
                found.add(
                    sim.scenario.id,
                    "template",
                    f"assistant message {turn.index} holds {len(message['tool_calls'])} parallel tool calls, which "
                    "the template writes as a turn each: an engine stops after the first and samples the others in "
                    "later turns",
                    reason="parallel_calls_per_turn",
                )
        if string_form(sim, shapes):
            _string_arguments_dropped(ctx, sim, found)
    unique = {f.reason: f for f in reversed(found.findings)}
    found.findings = [f for f in found.findings if unique[f.reason] is f]
    summary = "tool calls render in every form played" if not found.findings else found.findings[0].message
    return found.outcome(summary, "no tool call was played")
