"""special_token_injection: text from a tool or a user that encodes to control tokens.

The scenarios put the control tokens the template itself writes first (``<|im_end|>``, ``<|im_start|>``): forging
those is what ends turns and forges roles. Under ``--renderer``: [renderers.md](../renderers.md), "Control-token
text in content".

**Example** (``Qwen/Qwen2.5-7B-Instruct``, ``single_call/special_text``, class ``special_token``, first divergent
token 245): ``... encodes to control tokens when the render is encoded plainly: 8 forged control token(s) such as
<|im_end|>, <|im_start|>, <|object_ref_end|>, <|object_ref_start|>``.

    sanitized   ' echo this: ' | 27 '<' 91 '|' 318 'im' 4906 '_start' 91 '|' ...
    plain       ' echo this: ' | 151644 '<|im_start|>' 220 ' ' 151645 '<|im_end|>' 220 ' ' 151646 '<|object_ref_start|>'
"""

from __future__ import annotations

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome


@check(
    id="special_token_injection",
    title="Control-token text in content",
    severity="warning",
    order=110,
    explanation="""
A tool result or user message that contains the literal text of a control token (`<|im_end|>`, `</s>`) becomes
that control token when the rendered text is encoded plainly: the environment can end turns, forge roles or
inject stop tokens into the context, and naive re-encoding disagrees with a sanitized buffer. Under `--renderer`
the plain side is what the engine feeds the model (a library's ids, or its text encoded plainly), compared with
the same ids where content's control-token text is kept as text.""",
    fix_hint="""
Encode environment messages with control-token text sanitized (transformers'
`apply_chat_template(..., sanitize_control_tokens=True)`, which tito_audit's bridge uses) or escape it.""",
)
def special_token_injection(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "special_token_injection")
    sims = [s for s in ctx.ok_simulations() if "special_text" in s.scenario.tags]
    for sim in sims:
        renderer = ctx.renderer_for(sim.scenario)
        tools = list(sim.scenario.tools)
        try:  # both sides or neither: a failed sanitized render must not leave plain compared with plain
            safe = renderer.sanitized_ids(sim.messages, tools=tools)
            plain = renderer.encode(renderer.render(sim.messages, tools=tools))
        except RenderError as err:
            found.failed(sim.scenario.id, err)
            continue
        f = found.compare(
            sim.scenario.id,
            safe,
            plain,
            "control-token text in tool/user content encodes to control tokens when the render is encoded plainly"
            if ctx.engine.is_template
            else f"control-token text in tool/user content becomes control tokens in what {ctx.engine.name} feeds the "
            "model",
            cls="special_token",
        )
        if f:
            extra = [i for i in plain if i in ctx.special_ids]
            for i in safe:
                if i in ctx.special_ids and i in extra:
                    extra.remove(i)
            names = sorted(set(ctx.tokenizer.convert_ids_to_tokens(extra)))
            f.message += f": {len(extra)} forged control token(s) such as {', '.join(names[:4])}"
    summary = (
        f"content text stays text ({found.comparisons} episodes)" if not found.findings else found.findings[0].message
    )
    return found.outcome(summary, "no special-token scenario renders with this template")
