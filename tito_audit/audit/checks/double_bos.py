"""double_bos: BOS doubled when rendered text is encoded with special tokens added.

Cached prompt ids and re-encoded ones then disagree.

**Example** (``meta-llama/Llama-3.2-3B-Instruct``, class ``special_token``, first divergent token 1):

    add_special_tokens=False  128000 '<|begin_of_text|>' | 128006 '<|start_header_id|>' 9125 'system'
    add_special_tokens=True   128000 '<|begin_of_text|>' | 128000 '<|begin_of_text|>' 128006 '<|start_header_id|>'
"""

from __future__ import annotations

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome


@check(
    id="double_bos",
    title="No doubled BOS",
    severity="warning",
    order=120,
    merge_dependent="whether encoding adds a BOS is the real tokenizer's post-processor, which no template shows "
    "(agreed on 8 of 16 models)",
    explanation="""
Templates that write `bos_token` themselves produce text that already starts with BOS; encoding it with the
tokenizer's default `add_special_tokens=True` adds a second one. Prompts then differ from training data by one
token and every position shifts.""",
    fix_hint="Encode rendered chat text with `add_special_tokens=False` (as apply_chat_template does).",
)
def double_bos(ctx: AuditContext) -> Outcome:
    tok = ctx.tokenizer
    if tok.bos_token_id is None:
        return Outcome(not_applicable="the tokenizer has no BOS token")
    sim = next(iter(ctx.ok_simulations()), None)
    if sim is None:
        return Outcome(not_applicable="no conversation renders")
    try:
        text = ctx.renderer_for(sim.scenario).render(
            sim.messages[:1], tools=list(sim.scenario.tools), add_generation_prompt=True
        )
    except RenderError:
        return Outcome(not_applicable="no conversation renders")
    plain = ctx.renderer.encode(text)
    added = ctx.renderer.encode(text, add_special_tokens=True)
    if added[:2] == [tok.bos_token_id, tok.bos_token_id]:
        found = Collector(ctx, "double_bos")
        found.compare(
            sim.scenario.id,
            plain,
            added,
            f"encoding with add_special_tokens=True doubles {tok.bos_token!r}",
            cls="special_token",
        )
        return found.outcome(f"encoding with special tokens doubles {tok.bos_token!r}", "")
    return Outcome([], "BOS appears once", comparisons=1)
