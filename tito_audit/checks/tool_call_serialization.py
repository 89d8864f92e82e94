"""tool_call_serialization: parse -> re-serialize drift of the tool calls a model emits."""

from __future__ import annotations

import json
from typing import Any

from tito_audit.checks.base import check
from tito_audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.findings import Collector, Finding, Outcome
from tito_audit.scenarios.adapt import call_function, with_arguments

# Equivalent JSON a model can emit for the same arguments; a parser maps them all to one dict.
_FORMS = {
    "compact separators": lambda a: json.dumps(a, separators=(",", ":"), ensure_ascii=False),
    "reversed key order": lambda a: json.dumps(dict(reversed(list(a.items()))), ensure_ascii=False),
    "ascii escapes": lambda a: json.dumps(a, ensure_ascii=True),
}


def _with_args(message: dict[str, Any], args: Any) -> dict[str, Any]:
    calls = [with_arguments(c, args) for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


@check(
    id="tool_call_serialization",
    title="Tool-call re-serialization",
    severity="warning",
    order=100,
    explanation="""
Rollout code parses the model's tool call into a dict and the template serializes it again (`tojson`, its
own separators and key order, sometimes Python `repr` with `True` and single quotes). Whenever the model's
own JSON differs from the template's normal form, the re-rendered call is not the sampled text.""",
    fix_hint="""
Keep the sampled ids; if you must re-render, keep the raw argument string the model produced and pass it as
a string (templates that print string arguments verbatim then reproduce it).""",
)
def tool_call_serialization(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "tool_call_serialization")
    findings = found.findings
    tried = drifted = failed = 0
    sim = next((s for s in ctx.ok_simulations() if s.scenario.id.startswith("single_call/booleans")), None)
    sim = sim or next((s for s in ctx.ok_simulations() if "tool" in s.scenario.tags), None)
    if sim is None:
        return Outcome(not_applicable="no tool conversation renders with this template")
    renderer = ctx.renderer_for(sim.scenario)
    tools = list(sim.scenario.tools)
    idx = next(i for i, m in enumerate(sim.messages) if m.get("tool_calls"))
    msg = sim.messages[idx]
    args = call_function(msg["tool_calls"][0])["arguments"]
    if isinstance(args, str):
        args = json.loads(args)
    history = sim.messages[:idx]
    try:
        canonical = renderer.render([*history, msg], tools=tools)
    except RenderError:
        return Outcome(not_applicable="the tool-call turn does not render")
    for name, form in _FORMS.items():
        emitted = form(args)
        tried += 1
        try:
            as_text = renderer.render([*history, _with_args(msg, emitted)], tools=tools)
        except RenderError:
            failed += 1  # the template does not take string arguments: reported below
            continue
        if emitted not in as_text:
            continue  # the template does not print string arguments verbatim; covered below
        if as_text != canonical:
            drifted += 1
            found.compare(
                sim.scenario.id,
                renderer.encode(as_text),
                renderer.encode(canonical),
                f"a call emitted with {name} is re-serialized differently after parsing",
                cls="serialization",
            )
    leak = [s for s in ("True", "False", "None", "'") if s in canonical and s not in json.dumps(args)]
    rendered_args = canonical[len(renderer.render(history, tools=tools, add_generation_prompt=True)) :]
    if any(s in rendered_args for s in ("True", "False", "None")) or "{'" in rendered_args:
        findings.append(
            Finding(
                "tool_call_serialization",
                sim.scenario.id,
                "serialization",
                f"arguments render as Python repr ({', '.join(leak) or 'quotes'}), not JSON",
            )
        )
    try:
        as_string = renderer.render([*history, _with_args(msg, json.dumps(args, ensure_ascii=False))], tools=tools)
        if as_string != canonical:
            findings.append(
                Finding(
                    "tool_call_serialization",
                    sim.scenario.id,
                    "serialization",
                    "arguments given as a JSON string render differently from the same dict",
                )
            )
    except RenderError as exc:
        findings.append(
            Finding(
                "tool_call_serialization",
                sim.scenario.id,
                "serialization",
                f"arguments given as a JSON string are rejected: {exc.message}",
            )
        )
    for f in findings:
        f.rate = drifted / max(tried, 1)
    summary = (
        "tool calls re-serialize to the sampled text"
        if not findings
        else (f"{drifted} of {tried} equivalent JSON forms drift; " + findings[0].message)
    )
    return Outcome(
        findings, summary, data={"forms_tried": tried, "forms_drifted": drifted}, comparisons=tried + 2 - failed
    )
