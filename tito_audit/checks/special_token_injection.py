"""special_token_injection: text from a tool or a user that encodes to control tokens."""

from __future__ import annotations

from tito_audit.checks.base import Finding, Outcome, check
from tito_audit.context import AuditContext
from tito_audit.rendering.renderer import RenderError


@check(
    id="special_token_injection",
    title="Control-token text in content",
    severity="warning",
    order=110,
    explanation="""
A tool result or user message that contains the literal text of a control token (`<|im_end|>`, `</s>`) becomes
that control token when the rendered text is encoded plainly: the environment can end turns, forge roles or
inject stop tokens into the context, and naive re-encoding disagrees with a sanitized buffer.""",
    fix_hint="""
Encode environment messages with control-token text sanitized (transformers'
`apply_chat_template(..., sanitize_control_tokens=True)`, which tito_audit's bridge uses) or escape it.""",
)
def special_token_injection(ctx: AuditContext) -> Outcome:
    findings: list[Finding] = []
    sims = [s for s in ctx.ok_simulations() if "special_text" in s.scenario.tags]
    if not sims:
        return Outcome(not_applicable="no special-token scenario renders with this template")
    for sim in sims:
        renderer = ctx.renderer_for(sim.scenario)
        tools = list(sim.scenario.tools)
        try:
            safe = renderer.render_ids(sim.messages, tools=tools)
            plain = renderer.encode(renderer.render(sim.messages, tools=tools))
        except RenderError:
            continue
        f = ctx.divergence(
            "special_token_injection",
            sim.scenario.id,
            safe,
            plain,
            "control-token text in tool/user content encodes to control tokens when the render is encoded plainly",
            cls="special_token",
        )
        if f:
            extra = [i for i in plain if i in ctx.special_ids]
            for i in safe:
                if i in ctx.special_ids and i in extra:
                    extra.remove(i)
            names = sorted(set(ctx.tokenizer.convert_ids_to_tokens(extra)))
            f.message += f": {len(extra)} forged control token(s) such as {', '.join(names[:4])}"
            findings.append(f)
    return Outcome(findings, "content text stays text" if not findings else findings[0].message)
