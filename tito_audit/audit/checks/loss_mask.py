"""loss_mask: `{% generation %}` markers exist and the stop token falls inside the assistant mask.

The mask is the one ``return_assistant_tokens_mask`` returns.

**Example** (``Qwen/Qwen3-0.6B``, scenario ``template``, class ``template``): ``no {% generation %} markers:
assistant masks are unavailable`` (every shared model's stock template lacks them).
"""

from __future__ import annotations

import re

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Finding, Outcome

_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")


@check(
    id="loss_mask",
    title="Assistant mask markers",
    severity="warning",
    order=130,
    explanation="""
Without `{% generation %}` markers `return_assistant_tokens_mask` returns nothing, so re-rendering code
must guess which tokens are trainable; with markers that stop before the turn-end token the model is never
trained to stop.""",
    fix_hint="""
Take the mask from the token buffer (1 on sampled ids, stop token included), or add `{% generation %}` /
`{% endgeneration %}` around assistant output including its stop token (`tito-audit fix`).""",
)
def loss_mask(ctx: AuditContext) -> Outcome:
    if not ctx.engine.is_template:
        return Outcome(not_applicable=f"renderer {ctx.engine.name} is no chat template: no markers to read")
    if not _MARKER.search(ctx.model.chat_template):
        return Outcome(
            [
                Finding(
                    "loss_mask",
                    "template",
                    "template",
                    "no {% generation %} markers: assistant masks are unavailable",
                )
            ],
            "no {% generation %} markers",
            comparisons=1,
        )
    found = Collector(ctx, "loss_mask")
    for sim in ctx.ok_simulations(exclude_tags=("special_text",))[:6]:
        # Through the Renderer: the same sandbox, pinned date and time/size limits as every other render.
        try:
            ids, mask = ctx.renderer_for(sim.scenario).render_with_mask(sim.messages, tools=list(sim.scenario.tools))
        except RenderError as err:
            found.failed(sim.scenario.id, err)  # e.g. markers this transformers version cannot map to tokens
            continue
        found.compared()
        stops = set(ctx.stop_ids)
        for i, t in enumerate(ids):
            if t in stops and i > 0 and mask[i - 1] and not mask[i]:
                found.add(
                    sim.scenario.id,
                    "stop_seam",
                    f"the stop token at position {i} is outside the assistant mask",
                    index=i,
                )
                break
    summary = "markers present, stop tokens masked in" if not found.findings else found.findings[0].message
    return found.outcome(summary, "no episode renders with its assistant mask")
