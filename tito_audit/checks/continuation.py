"""continuation: continuing an unterminated assistant turn by re-rendering it gives back the buffer."""

from __future__ import annotations

from typing import Any

from tito_audit.checks.base import check
from tito_audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.findings import Collector, Outcome
from tito_audit.rollout.tokens import common_prefix_len

_EPISODES = {"full": 3, "quick": 1}  # episodes whose last answer is cut and continued, per scenario set
_TRIES = 8  # cuts tried from the middle of an answer until one falls inside its content


@check(
    id="continuation",
    title="A cut turn continues from the buffer",
    severity="warning",
    order=140,
    verdict="caveat",
    approximate_classes=True,
    explanation="""
A turn cut at the length limit, a prefill, or an answer the loop lets the model go on with is continued by
giving the engine the conversation so far, the unterminated assistant message last. A token buffer gives it the
ids it holds (the turn's prompt and the ids sampled so far); a loop that re-renders with
`continue_final_message=True` gives it the template's render of the message, cut where the message ends. Where
the two differ (a generation prompt that pre-fills what the finished turn does not write, a turn written
otherwise when it is last, trimmed text, a turn the template cannot show unterminated), the model continues from
a context it did not produce, and the trained sequence is not what was sampled.""",
    fix_hint="""
Continue from the buffer (append the engine's ids for the continuation to the same turn); never re-render the
partial message. The verdict line names this form to avoid.""",
)
def continuation(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "continuation")
    played, episodes = 0, _EPISODES[ctx.options.scenarios]
    for sim in ctx.ok_simulations(exclude_tags=("special_text",)):
        if played >= episodes or sim.trajectory is None or not sim.turns:
            continue
        turn = sim.turns[-1]
        message = sim.messages[turn.index]
        body = turn.sampled_ids[:-1] if turn.stop_rendered else turn.sampled_ids
        if message.get("tool_calls") or not isinstance(message.get("content"), str) or len(body) < 2:
            continue
        renderer = ctx.renderer_for(sim.scenario)
        cut = _cut(renderer, body, turn.completion_text, message["content"])
        if cut is None:
            continue
        played += 1
        tools = list(sim.scenario.tools)
        ids, content = cut
        partial = {**message, "content": content}
        try:
            # what the model was given for this turn, and the ids it sampled before the cut
            prompt = renderer.render_ids(sim.messages[: turn.index], tools=tools, add_generation_prompt=True)
            sampled = [*prompt, *ids]
            text = renderer.render_continuation([*sim.messages[: turn.index], partial], tools=tools)
        except RenderError as err:
            found.compared()
            found.add(
                sim.scenario.id,
                "template",
                f"the template cannot render assistant message {turn.index} cut after {len(ids)} tokens for "
                f"continuation: {err.message}",
                reason="continue_final_message",
            )
            continue
        again = renderer.encode(text)
        in_prompt = common_prefix_len(sampled, again) < len(prompt)  # the prompt itself is written otherwise
        f = found.compare(
            sim.scenario.id,
            sampled,
            again,
            f"continuing assistant message {turn.index} cut after {len(ids)} sampled tokens: the re-rendered "
            "context is not the prompt and the ids sampled so far",
            cls="generation_prompt" if in_prompt else None,
        )
        if f is not None:
            f.reason = "continue_final_message"
    summary = (
        f"the buffer and a continue_final_message render agree in {found.comparisons} cut turns"
        if not found.findings
        else f"continuing a cut turn by re-rendering diverges in {len(found.findings)} of {found.comparisons}"
    )
    return found.outcome(summary, "no episode ends with an answer to cut")


def _cut(renderer: Any, body: list[int], completion: str, content: str) -> tuple[list[int], str] | None:
    """Where to cut a sampled answer: at half its ids or later, inside its content (what a loop parses into the
    message it continues: the sampled text after whatever the template writes before the content). None when the
    content is not found in the completion or no cut falls inside it."""
    start = completion.find(content[: max(1, min(8, len(content)))])
    if start < 0 or not content.strip():
        return None
    half = max(1, len(body) // 2)
    for k in range(half, min(len(body), half + _TRIES)):  # a few cuts from the middle on (each is one decode)
        text = renderer.decode(body[:k])
        if len(text) > start + 1 and content.startswith(text[start:]):
            return body[:k], text[start:]
    return None
