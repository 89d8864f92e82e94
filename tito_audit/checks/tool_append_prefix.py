"""tool_append_prefix: appending tool results is token-prefix-preserving (what TITO needs)."""

from __future__ import annotations

from typing import Any

from tito_audit.checks.base import Finding, Outcome, check
from tito_audit.context import AuditContext
from tito_audit.rendering.renderer import RenderError
from tito_audit.rollout.bridge import BridgeError, compute_bridge

# The smallest episode that has the property: one user turn, one call, one result (as TRL probes it),
# with a 9-alphanumeric call id so that strict templates accept it.
_PROBE_CALL = [{"id": "call00001", "type": "function", "function": {"name": "dummy", "arguments": {}}}]
_PROBE: list[dict[str, Any]] = [
    {"role": "user", "content": "dummy"},
    {"role": "assistant", "content": "", "tool_calls": _PROBE_CALL},
]
_PROBE_RESULT = [{"role": "tool", "tool_call_id": "call00001", "name": "dummy", "content": "dummy"}]


@check(
    id="tool_append_prefix",
    title="Tool appends preserve the token prefix",
    severity="error",
    order=20,
    explanation="""
TITO keeps the sampled ids and appends only the token delta of new messages. That delta exists only if the
template renders the history identically once tool results are appended (up to the assistant's stop token).
When it does not, no delta is correct: the buffer and every later prompt disagree with what the template
would show the model, and the gradient is computed on a context the model never sees at inference.""",
    fix_hint="""
Patch the template so an assistant turn renders the same whether or not it is the last message (for example
emit the empty `<think></think>` block on every turn, not only the last: `tito-audit fix`), or freeze the
rewritten prefix as prompt (loss 0) and start a new sample at each rewrite.""",
)
def tool_append_prefix(ctx: AuditContext) -> Outcome:
    findings: list[Finding] = []
    checked = 0
    try:
        compute_bridge(ctx.renderer, _PROBE, _PROBE_RESULT, None, ctx.stop_ids)
        checked += 1
    except BridgeError as exc:
        f = ctx.divergence("tool_append_prefix", "probe/minimal", exc.before, exc.after, exc.reason)
        if f:
            findings.append(f)
    except RenderError:
        pass  # strict templates reject the bare probe; the scenarios below still decide
    for sim in ctx.ok_simulations():
        for idx, bridge_error in sim.bridge_errors:
            appended = {m["role"] for m in sim.messages[idx + 1 :] if m["role"] != "assistant"}
            nxt = next((m["role"] for m in sim.messages[idx + 1 :]), "")
            if nxt != "tool" and "tool_as_user" not in sim.adapters:
                continue
            f = ctx.divergence(
                "tool_append_prefix",
                sim.scenario.id,
                bridge_error.before,
                bridge_error.after,
                f"appending {', '.join(sorted(appended))} after assistant message {idx} rewrites the history",
            )
            if f:
                findings.append(f)
        checked += 1
    if checked == 0:
        return Outcome(not_applicable="no tool conversation renders with this template")
    summary = (
        f"prefix preserved in {checked} tool episodes"
        if not findings
        else f"history rewritten when a tool result is appended ({len(findings)} episode(s))"
    )
    return Outcome(findings, summary)
