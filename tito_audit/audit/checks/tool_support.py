"""tool_support: tool calls, tool results and arguments survive rendering in their canonical form.

A template that rejects every tool conversation shape fails too. The canonical form is the shape the template is
found to need ([Coverage](../checks.md#coverage-and-adaptations)); a template that rejects the ``tool`` role but
renders tool results as user turns is adapted, not failed (the verdict line says ``needs tool results sent as user
turns``). Training tool use through a template that drops them teaches the model to act on calls it cannot see.

An argument value or a tool result counts as rendered in whatever form the template writes it on every turn, with
nothing lost (``scenarios.shown_values``): as it is, JSON-escaped, as Python's ``repr`` of the dict writes it
(``{{ arguments }}``), with runs of whitespace squeezed, in another letter case or Unicode form, or in a form of the
template's own (HTML-escaped elements, JSON written compact): the call or the result rendered with a marker in the
value's place shows the marker, and what the real render writes in the marker's place holds every letter and digit
of the value, in order. A value the template cuts short, strips of its digits, replaces by a note or rewrites is
dropped. A tool result is looked for where the model is shown it: in the prompt the loop renders once its block is
appended, when a turn is sampled after it (a result written only once it is history, ``if not loop.last``, is
dropped: the model never saw it when it acted); that the template writes it otherwise once it is history (a number
normalized, an old result cut short) is a rewrite of the history, which the appends and the re-render judge. Of
several results with the same text, each needs its own copy (a template that writes only the first of parallel
results shows one).

**Example** (``microsoft/Phi-3-mini-4k-instruct``, ``probe/canonical``, class ``template``, reason
``drops_tool_calls``): ``tool calls are not rendered in the canonical form (with the adaptations it needs:
content_empty)`` and the same for tool results, then per scenario ``tool result (message 2) does not appear in the
rendering``: the verdict is ``unsafe``. ``allenai/OLMo-2-1124-7B-Instruct`` renders neither either; content None is
rejected by both (transformers drops a None ``content`` key, and their templates read it), hence ``content_empty``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.rollout.call_arguments import arguments_dict
from tito_audit.scenarios.adapt import call_function, content_text, with_arguments
from tito_audit.scenarios.shown_values import MARKER, in_place, shown


def _string_arguments(arguments: object) -> dict[str, str]:
    """A call's top-level string argument values that hold text (from a dict, or a JSON string of one)."""
    parsed = arguments_dict(arguments)
    if parsed is None:  # a string that is not arguments: its text is the one value
        return {"": arguments} if isinstance(arguments, str) and arguments.strip() else {}
    return {str(k): v for k, v in parsed.items() if isinstance(v, str) and v.strip()}


def _written_in_place(
    renderer: Any, messages: list[dict[str, Any]], i: int, j: int, key: str, full: str, tools: Any
) -> bool:
    """Whether the render writes argument ``key`` of message ``i``'s call ``j`` in a form of its own (an encoding
    ``shown`` does not know): see ``shown_values.in_place``. A value the template drops, truncates or replaces
    fails; so does one whose call the template does not render at all."""
    call = messages[i]["tool_calls"][j]
    arguments = call_function(call)["arguments"]
    as_string = isinstance(arguments, str)
    parsed = arguments_dict(arguments) if key else None  # ``key`` "": the arguments are a text of their own
    value = parsed[key] if parsed is not None else arguments
    marked = {**parsed, key: MARKER} if parsed is not None else MARKER
    calls = list(messages[i]["tool_calls"])
    calls[j] = with_arguments(call, json.dumps(marked) if as_string and key else marked)
    return in_place(_render(renderer, tools), messages, i, {**messages[i], "tool_calls": calls}, value, full)


def _result_in_place(
    renderer: Any, messages: list[dict[str, Any]], i: int, text: str, full: str, tools: Any, agp: bool = False
) -> bool:
    """Whether the render writes tool result ``i`` (whose text begins ``text``) in a form of its own: JSON compacted
    or re-indented, quotes escaped, another letter case, every turn alike (``shown_values``; ``agp``: ``full`` was
    rendered with the generation prompt)."""
    marked = {**messages[i], "content": MARKER}
    return in_place(_render(renderer, tools, agp), messages, i, marked, text, full)


def _render(renderer: Any, tools: Any, agp: bool = False) -> Callable[[Sequence[dict[str, Any]]], str]:
    return lambda messages: renderer.render(list(messages), tools=tools, add_generation_prompt=agp)


def _result_shown(
    renderer: Any, messages: list[dict[str, Any]], i: int, text: str, full: str, tools: Any, nth: int = 1
) -> bool:
    """Whether tool result ``i`` (whose text begins ``text``; the ``nth`` result with that text) is rendered where
    the model is shown it: in the prompt the loop renders once the result's block is appended, when a turn is
    sampled after it, else in the whole conversation's render ``full`` (see the module docstring)."""
    end = next((k for k in range(i + 1, len(messages)) if messages[k]["role"] == "assistant"), len(messages))
    agp = end < len(messages)
    if agp:
        try:
            full = renderer.render(messages[:end], tools=tools, add_generation_prompt=True)
        except RenderError:
            return False
    if shown(text, full, nth) or _result_in_place(renderer, messages[:end], i, text, full, tools, agp):
        return True
    # A text without a letter or digit (``[]``): no marker tells its copies apart, and history may have dropped an
    # older one; one copy is taken for it, as before copies were counted.
    return nth > 1 and not any(c.isalnum() for c in text) and shown(text, full)


def call_form(message: dict[str, Any], dropped: list[int], canonical_content: str | None = None) -> str | None:
    """The form a drop is confined to, when it is not the canonical one (content ``canonical_content`` next to
    the calls, all of them dropped): None when the canonical form drops."""
    calls = message.get("tool_calls") or []
    if dropped and len(dropped) < len(calls) and 0 not in dropped:
        return "parallel_calls"
    content = content_text(message)
    if content == canonical_content or (not content and not canonical_content):
        return None
    return "tool_calls_with_empty_content" if content == "" else "tool_calls_with_content"


@check(
    id="tool_support",
    title="Tool calls survive rendering",
    severity="error",
    order=10,
    verdict="unsafe",
    explanation="""
A template that silently drops `tool_calls`, tool results or arguments in their canonical form (one call,
`content` None, dict arguments, the `tool` role; or the shape the template is found to need) cannot be used for
tool-calling RL: the model never sees its own tool traffic at inference, its sampled call vanishes from every
re-rendered context and the bridge for the tool result is computed against a history that never contained the
call. Drops confined to another form are `tool_forms`' concern.""",
    fix_hint="""
Use a template that renders `message.tool_calls` (name and arguments) and the `tool` role, or patch it
(`tito-audit fix`); do not train tool use through a template that cannot show it.""",
)
def tool_support(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "tool_support")
    shapes = ctx.shapes
    if shapes.rejects_tools is not None:
        found.add(
            "probe/canonical",
            "template",
            f"the template rejects every tool conversation shape: {shapes.rejects_tools}",
            reason="rejects_tool_traffic",
        )
        return found.outcome(found.findings[0].message, "")
    found.compared()  # the canonical probe
    words = {"tool_calls": "tool calls are", "arguments": "tool-call arguments are", "tool_results": "tool results are"}
    for what in shapes.drops:
        found.add(
            "probe/canonical",
            "template",
            f"{words[what]} not rendered in the canonical form"
            + (f" (with the adaptations it needs: {', '.join(shapes.adaptations)})" if shapes.adaptations else ""),
            reason=f"drops_{what}",
        )
    for sim in ctx.ok_simulations():
        if "tool" not in sim.scenario.tags:
            continue
        for turn in sim.turns:
            form = call_form(sim.messages[turn.index], turn.dropped_calls, shapes.canonical_content)
            if turn.tool_calls_dropped and form is None:
                found.add(sim.scenario.id, "template", dropped_message(sim.messages, turn), reason="drops_tool_calls")
        renderer, tools = ctx.renderer_for(sim.scenario), list(sim.scenario.tools)
        try:
            full = renderer.render(sim.messages, tools=tools)
        except RenderError as err:
            found.failed(sim.scenario.id, err)
            continue
        found.compared()
        texts = [(content_text(m) or "").strip()[:40] if m["role"] == "tool" else "" for m in sim.messages]
        for i, m in enumerate(sim.messages):  # as played (adapted), so that indices match the turns
            text, nth = texts[i], texts[: i + 1].count(texts[i])
            if text and not _result_shown(renderer, sim.messages, i, text, full, tools, nth):
                found.add(
                    sim.scenario.id,
                    "template",
                    f"tool result (message {i}) does not appear in the rendering",
                    reason="drops_tool_results",
                )
            for j, call in enumerate(m.get("tool_calls") or []):
                values = _string_arguments(call_function(call)["arguments"])
                missing = [
                    v
                    for k, v in values.items()
                    if not shown(v, full) and not _written_in_place(renderer, sim.messages, i, j, k, full, tools)
                ]
                if missing and not any(t.tool_calls_dropped for t in sim.turns if t.index == i):
                    found.add(
                        sim.scenario.id,
                        "serialization",
                        f"argument value {missing[0]!r} of message {i} is not rendered",
                        reason="drops_arguments",
                    )
    # One finding per message is enough to act on; keep the report readable.
    unique = {f.message: f for f in reversed(found.findings)}
    found.findings = [f for f in found.findings if unique[f.message] is f]
    summary = "tool calls, results and arguments render" if not found.findings else found.findings[0].message
    return found.outcome(summary, "no tool conversation renders")


def dropped_message(messages: list[dict[str, Any]], turn: Any) -> str:
    calls = messages[turn.index].get("tool_calls") or []
    if len(turn.dropped_calls) == len(calls):
        return f"tool_calls of assistant message {turn.index} are not rendered"
    which = ", ".join(f"#{i + 1} ({call_function(calls[i]).get('name', '?')})" for i in turn.dropped_calls)
    return f"parallel tool call {which} of {len(calls)} in assistant message {turn.index} is not rendered"
