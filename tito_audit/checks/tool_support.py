"""tool_support: tool calls, tool results and arguments survive rendering at all."""

from __future__ import annotations

import json
from typing import Any

from tito_audit.checks.base import Finding, Outcome, check
from tito_audit.context import AuditContext


def _arg_values(arguments: object) -> list[str]:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return [str(arguments)]
    if isinstance(arguments, dict):
        return [v for v in arguments.values() if isinstance(v, str) and v.strip()]
    return []


@check(
    id="tool_support",
    title="Tool calls survive rendering",
    severity="error",
    order=10,
    explanation="""
A template that silently drops `tool_calls`, tool results or arguments cannot be used for tool-calling RL:
the model's sampled call vanishes from every re-rendered context and the bridge for the tool result is
computed against a history that never contained the call.""",
    fix_hint="""
Use a template that renders `message.tool_calls` (name and arguments) and the `tool` role, or patch it
(`tito-audit fix`); do not train tool use through a template that cannot show it.""",
)
def tool_support(ctx: AuditContext) -> Outcome:
    findings: list[Finding] = []
    tool_sims = [s for s in ctx.simulations if "tool" in s.scenario.tags]
    if tool_sims and all(not s.ok for s in tool_sims):
        first = tool_sims[0].error
        msg = first.message if first else "no tool scenario renders"
        findings.append(
            Finding(
                "tool_support",
                tool_sims[0].scenario.id,
                "template",
                f"the template rejects every tool conversation: {msg}",
            )
        )
        return Outcome(findings, f"rejects tool conversations: {msg}")
    for sim in tool_sims:
        if not sim.ok:
            continue
        if "tool_as_user" in sim.adapters:
            findings.append(
                Finding(
                    "tool_support",
                    sim.scenario.id,
                    "template",
                    "the template rejects the `tool` role; tool results had to be sent as user turns",
                )
            )
        for turn in sim.turns:
            if turn.tool_calls_dropped:
                findings.append(
                    Finding("tool_support", sim.scenario.id, "template", _dropped_message(sim.messages, turn))
                )
        full = ctx.renderer_for(sim.scenario).render(sim.messages, tools=list(sim.scenario.tools))
        for i, m in enumerate(sim.scenario.messages):
            text = (m.get("content") or "").strip()[:40] if m["role"] == "tool" else ""
            if text and text not in full and json.dumps(text)[1:-1] not in full:
                findings.append(
                    Finding(
                        "tool_support",
                        sim.scenario.id,
                        "template",
                        f"tool result (message {i}) does not appear in the rendering",
                    )
                )
            for call in m.get("tool_calls") or []:
                missing = [v for v in _arg_values(call["function"]["arguments"]) if v not in full]
                if missing and not any(t.tool_calls_dropped for t in sim.turns if t.index == i):
                    findings.append(
                        Finding(
                            "tool_support",
                            sim.scenario.id,
                            "serialization",
                            f"argument value {missing[0]!r} of message {i} is not rendered verbatim",
                        )
                    )
    # One finding per (message) is enough to act on; keep the report readable.
    unique: dict[str, Finding] = {}
    for f in findings:
        unique.setdefault(f.message, f)
    findings = list(unique.values())
    summary = "tool calls, results and arguments render" if not findings else findings[0].message
    return Outcome(findings, summary)


def _dropped_message(messages: list[dict[str, Any]], turn: Any) -> str:
    calls = messages[turn.index].get("tool_calls") or []
    if len(turn.dropped_calls) == len(calls):
        return f"tool_calls of assistant message {turn.index} are not rendered"
    which = ", ".join(f"#{i + 1} ({calls[i].get('function', calls[i]).get('name', '?')})" for i in turn.dropped_calls)
    return f"parallel tool call {which} of {len(calls)} in assistant message {turn.index} is not rendered"
