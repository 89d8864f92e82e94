r"""generation_prompt: the generation prompt matches how the same turn renders once it is history.

A system prompt placed differently in the prompt than in history is found the same way.

**Example** (``Qwen/Qwen3-0.6B``, ``reasoning/plain[enable_thinking=false]``, class ``generation_prompt``, first
divergent token 237): ``the generation prompt ends with '\n</think>\n\n', which the same turn lacks once it is
history (history continues with 'The user wants the weather, so I call…' (149 chars) there)`` — with thinking off
the prompt pre-fills an empty think block, while the finished turn renders its reasoning.

    prompt   151644 '<|im_start|>' 77091 'assistant' 198 '\n' 151667 '<think>' | 271 '\n\n' 151668 '</think>' 271 '\n\n'
    history  151644 '<|im_start|>' 77091 'assistant' 198 '\n' 151667 '<think>' | 198 '\n' 785 'The' 1196 ' user'
"""

from __future__ import annotations

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.report.findings import Outcome
from tito_audit.report.quote import quoted


@check(
    id="generation_prompt",
    title="Generation prompt matches history",
    severity="warning",
    order=60,
    explanation="""
The model samples after the generation prompt. If the template renders that same turn differently once it
is history (a `<think>\\n` prefill that history omits, an empty think block only in the prompt), the prompt
tokens in the buffer are not the ones a re-render produces, and the sampled text starts from a context the
training data never had.""",
    fix_hint="""
Keep the prompt tokens from the buffer (never re-render them), and make the template render the assistant
header identically in both places, or mask the differing prefill as prompt.""",
)
def generation_prompt(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "generation_prompt")
    seen: set[tuple[str, str]] = set()
    for sim in ctx.ok_simulations():
        for turn in sim.turns:
            if not turn.gen_prompt_extra:
                found.compared()  # the generation prompt is exactly how the turn starts as history
                continue
            key = (turn.gen_prompt_extra, turn.gen_prompt_missing)
            if key in seen:
                continue
            seen.add(key)
            prompt_ids = ctx.renderer.encode(turn.prompt_text)
            start = len(turn.prompt_text) - len(turn.gen_prompt_extra)
            history = turn.history_before + turn.completion_text
            history_ids = ctx.renderer.encode(history)
            found.compare(
                sim.scenario.id,
                prompt_ids,
                history_ids,
                f"the generation prompt ends with {quoted(turn.gen_prompt_extra)}, which the same turn lacks once"
                f" it is history (history continues with {quoted(history[start:])} there)",
                cls="generation_prompt",
            )
    summary = "prompt and history agree" if not found.findings else found.findings[0].message
    return found.outcome(summary, "no assistant turn was played")
