"""toy_buffer_decodes: every played episode's token buffer decodes to text (a toy check).

Dropped into ``tito_audit/audit/checks/``, this module is all it takes: the audit runs the check and every report
lists it, and ``scripts/generate_docs.py`` writes its page, ``docs/checks/toy_buffer_decodes.md``, from this
docstring and the registration below (tests/test_registry.py).

**Example** (``Qwen/Qwen3-0.6B``): ``64 of 64 buffers decode to text``.
"""

from __future__ import annotations

from tito_audit.audit.checks.base import check
from tito_audit.audit.context import AuditContext
from tito_audit.report.findings import Outcome


@check(
    id="toy_buffer_decodes",
    title="Buffers decode to text",
    severity="warning",
    order=999,
    explanation="A toy: every played episode's token buffer decodes to some text.",
    fix_hint="Nothing to fix: it is a toy.",
)
def toy_buffer_decodes(ctx: AuditContext) -> Outcome:
    buffers = [s.trajectory.input_ids for s in ctx.ok_simulations() if s.trajectory is not None]
    decoded = sum(1 for ids in buffers if ctx.tokenizer.decode(ids))
    return Outcome([], f"{decoded} of {len(buffers)} buffers decode to text", comparisons=len(buffers))
