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
from tito_audit.audit.checks.tool_support import (
    call_form,
    cut_results,
    dropped_message,
    dropped_results,
    missing_arguments,
    string_form,
)
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.rollout.payloads import only_later_calls
from tito_audit.scenarios.shown_values import MARKER, letters


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


def _long_results_cut(ctx: AuditContext, sim: Any, found: Collector) -> None:
    """Tool results whose end or middle the template never shows (``tool_support.cut_results``: cut to a length, to
    their first lines or to a head and a tail, on every turn): the model acts on part of what the tool returned."""
    renderer, tools = ctx.renderer_for(sim.scenario), list(sim.scenario.tools)
    try:
        full = renderer.render(sim.messages, tools=tools)
    except RenderError:
        return
    cut = cut_results(renderer, sim.messages, full, tools)
    if cut:
        i, part = cut[0]
        missing = (
            "its last characters do not appear"
            if part == "end"
            else "its middle (start and end shown) does not appear whole and in order"
        )
        found.add(
            sim.scenario.id,
            "template",
            f"tool result (message {i}) is cut: {missing} where the model is shown it",
            reason="results_cut",
        )


def _results_without_name(ctx: AuditContext, found: Collector) -> None:
    """The first tool scenario played again with its tool messages' ``name`` left out, as OpenAI's messages come
    (``tool_call_id`` and content only; every scenario sends a name): a result shown with a name and dropped without
    one is a form to avoid (a template that writes ``message.content`` only ``if message.name``)."""
    sim = next((s for s in ctx.ok_simulations() if "tool" in s.scenario.tags and _named(s.messages)), None)
    if sim is None:
        return
    renderer, tools = ctx.renderer_for(sim.scenario), list(sim.scenario.tools)
    nameless = [{k: v for k, v in m.items() if k != "name"} if m["role"] == "tool" else m for m in sim.messages]
    try:
        full, plain = renderer.render(nameless, tools=tools), renderer.render(sim.messages, tools=tools)
    except RenderError:
        return  # a template that needs the name raises without it: nothing is dropped silently
    found.compared()
    without = set(dropped_results(renderer, nameless, full, tools))
    if without:  # those dropped with the name too are tool_support's: read only when a result is lost
        without -= set(dropped_results(renderer, sim.messages, plain, tools))
    if without:
        found.add(
            f"{sim.scenario.id}/no_name",
            "template",
            f"tool result (message {min(without)}) does not appear in the rendering when the tool message has no name",
            reason="results_without_name",
        )


def _results_as_parts(ctx: AuditContext, found: Collector) -> None:
    """The first tool scenario played again with each tool result sent as a list of two text parts (its text, then
    a marker of its own), as multimodal tool messages come (red team 33: a template that writes a list's first part
    only was a clean SAFE; every scenario sends results as text). A result whose text or second part is then not in
    the render, and that is shown as text, is a form to avoid. A template that writes the list as Python writes it
    shows both (garbled, not lost); one that raises on a list drops nothing silently."""
    sim = next(
        (s for s in ctx.ok_simulations() if "tool" in s.scenario.tags and any(map(_text_result, s.messages))), None
    )
    if sim is None:
        return
    renderer, tools = ctx.renderer_for(sim.scenario), list(sim.scenario.tools)
    parted = [
        {**m, "content": [{"type": "text", "text": m["content"]}, {"type": "text", "text": _second_part(i)}]}
        if _text_result(m)
        else m
        for i, m in enumerate(sim.messages)
    ]
    try:
        full = renderer.render(parted, tools=tools)
    except RenderError:
        return
    found.compared()
    have = letters(full)
    lost = [
        i
        for i, m in enumerate(parted)
        if m is not sim.messages[i]
        and not (letters(_second_part(i)) in have and letters(m["content"][0]["text"][:40]) in have)
    ]
    if lost:  # only what is shown as text is a form's loss: the drops of the text form are tool_support's
        try:
            plain = renderer.render(sim.messages, tools=tools)
        except RenderError:
            return
        as_text = set(dropped_results(renderer, sim.messages, plain, tools))
        lost = [i for i in lost if i not in as_text]
    if lost:
        found.add(
            f"{sim.scenario.id}/parts",
            "template",
            f"tool result (message {lost[0]}) sent as a list of text parts is not rendered whole "
            "(a part, or all, is missing)",
            reason="results_as_parts",
        )


def _second_part(i: int) -> str:
    return f"{MARKER} part two {i:03d}"


def _text_result(message: Any) -> bool:
    return bool(message["role"] == "tool" and isinstance(message.get("content"), str) and message["content"].strip())


def _named(messages: list[Any]) -> bool:
    return any(m["role"] == "tool" and m.get("name") for m in messages)


@check(
    id="tool_forms",
    title="Tool calls in other forms",
    severity="warning",
    order=12,
    verdict="caveat",
    explanation="""
Some templates render tool calls in their canonical form but drop them in another one: only when `content` is
`""` (or text) next to the calls, or every call of a parallel pair but the first; a call's arguments only when they
are sent as a JSON string (the template reads a mapping); a tool result only when its message has no `name`
(OpenAI's tool messages carry `tool_call_id` and content), or only when it is sent as a list of text parts (a
multimodal tool message); a long result whose end or middle the template leaves out. The verdict stands, but
rollouts that produce that form train on traffic the model never sees: the verdict line names the form to avoid. A
template that writes each of parallel calls as a turn of its own, closed by the stop (harmony's `<|call|>`), has an
engine sample them one per turn: a parallel message is a form its rollouts never produce.""",
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
        if "tool" in sim.scenario.tags:
            _long_results_cut(ctx, sim, found)
    _results_without_name(ctx, found)
    _results_as_parts(ctx, found)
    unique = {f.reason: f for f in reversed(found.findings)}
    found.findings = [f for f in found.findings if unique[f.reason] is f]
    summary = "tool calls render in every form played" if not found.findings else found.findings[0].message
    return found.outcome(summary, "no tool call was played")
