r"""continuation: continuing an unterminated assistant turn by re-rendering it gives back the buffer.

The cut: ``continue_final_message=True`` (transformers' own). For the last answer of up to three episodes (one in
the quick set), cut inside its content, and for up to as many answers that carry reasoning, cut inside that
reasoning (the commonest cut for a thinking model), it compares the turn's prompt plus the ids sampled so far with
the encoded continuation render. A reasoning cut is handed back in both forms a loop holds it in: parsed (the
reasoning field, content still empty) and raw (the whole sampled text as content); inline reasoning is part of the
content. A template that cannot render the cut message for continuation is a finding too. Where the template
carries reasoning but no played answer shows it, the summary says that a cut inside reasoning was not compared (it
is not passed).

**Example** (``tests/data/continuation/prefill_think.jinja``, a QwQ-like template, class ``generation_prompt``):
the prompt pre-fills ``<think>\n``, which the re-rendered continuation lacks; the verdict line says ``avoid
continuing a cut turn by re-rendering it (continue it from the buffer)``. On the shared models, reasoning cuts
diverge: ``Qwen/Qwen3-0.6B`` ``continuing a cut turn by re-rendering diverges in 5 of 9 (turns cut in answers: 3,
in reasoning: 3)``, the first finding (``reasoning/plain``, class ``history_rewrite``) ``continuing assistant
message 3 cut after 4 sampled tokens in its reasoning (parsed): the re-rendered context is not the prompt and the
ids sampled so far``; ``openai/gpt-oss-20b`` 5 of 8, its template refusing the raw form (``the template cannot
render assistant message 3 cut after 6 tokens in its reasoning (raw) for continuation: You have passed a message
containing <|channel|> tags in the content field...``). The seven others agree in all 5 comparisons.
"""

from __future__ import annotations

from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.scenarios.adapt import reasoning_of

_EPISODES = {"full": 3, "quick": 1}  # episodes whose last answer is cut and continued, per scenario set
_TRIES = 8  # cuts tried from the middle of an answer (or its reasoning) until one falls inside it


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
    reasoning = ctx.shapes.reasoning
    episodes = _EPISODES[ctx.options.scenarios]
    played = {kind: 0 for kind in _KINDS}
    for sim in ctx.ok_simulations(exclude_tags=("special_text",)):
        if all(n >= episodes for n in played.values()):
            break
        if sim.trajectory is None or not sim.turns:
            continue
        turn = sim.turns[-1]
        message = sim.messages[turn.index]
        body = turn.sampled_ids[:-1] if turn.stop_rendered else turn.sampled_ids
        if message.get("tool_calls") or not isinstance(message.get("content"), str) or len(body) < 2:
            continue
        renderer = ctx.renderer_for(sim.scenario)
        inline = reasoning.mode == "inline" and all(reasoning.tags)
        thought = reasoning_of(message, reasoning.tags if inline else ("<think>", "</think>"), reasoning.field)
        answer = message["content"].split(reasoning.tags[1], 1)[-1].lstrip() if inline and thought else None
        for kind, inside in (("answers", answer or message["content"]), ("reasoning", thought)):
            if played[kind] >= episodes or not inside.strip():
                continue
            cut = _cut(renderer, body, turn.completion_text, inside)
            if cut is None:
                continue
            played[kind] += 1
            for form, partial in _partials(message, kind, cut, turn.completion_text, reasoning.field):
                _compare(found, ctx, renderer, sim, turn.index, cut[0], partial, f"{kind} ({form})")
    cuts = "turns cut " + ", ".join(f"in {k}: {played[k]}" for k in _KINDS if played[k])
    summary = (
        f"the buffer and a continue_final_message render agree in {found.comparisons} comparisons ({cuts})"
        if not found.findings
        else f"continuing a cut turn by re-rendering diverges in {len(found.findings)} of {found.comparisons} ({cuts})"
    )
    if reasoning.mode and not played["reasoning"]:  # reasoning reaches the render, but no cut fell inside it
        summary += "; a turn cut inside its reasoning was not compared (no played answer shows its reasoning)"
    return found.outcome(summary, "no episode ends with an answer to cut")


_KINDS = ("answers", "reasoning")  # where a turn is cut: inside what it says, inside the reasoning it carries


def _partials(
    message: dict[str, Any], kind: str, cut: tuple[list[int], str], completion: str, field: str
) -> list[tuple[str, dict[str, Any]]]:
    """The unterminated message a loop hands back, in each form it can hold a turn cut inside its ``kind``: the
    sampled text from where the content starts as its content (inline reasoning is part of it); for a cut inside a
    reasoning field, that reasoning as parsed (content still empty), and the whole sampled text as raw content (a
    loop without a reasoning parser)."""
    _, text = cut
    if kind == "answers" or not message.get(field):
        start = completion.find(message["content"][: max(1, min(8, len(message["content"])))])
        return [("content", {**message, "content": text[max(0, start) :]})]
    start = completion.find(message[field][:8])
    bare = {k: v for k, v in message.items() if k != field}
    return [("parsed", {**message, "content": "", field: text[start:]}), ("raw", {**bare, "content": text})]


def _compare(
    found: Collector, ctx: AuditContext, renderer: Any, sim: Any, index: int, ids: list[int], partial: Any, where: str
) -> None:
    tools = list(sim.scenario.tools)
    try:
        # what the model was given for this turn, and the ids it sampled before the cut
        prompt = renderer.render_ids(sim.messages[:index], tools=tools, add_generation_prompt=True)
        sampled = [*prompt, *ids]
        text = renderer.render_continuation([*sim.messages[:index], partial], tools=tools)
    except RenderError as err:
        found.compared()
        found.add(
            sim.scenario.id,
            "template",
            f"the template cannot render assistant message {index} cut after {len(ids)} tokens in its {where} for "
            f"continuation: {err.message}",
            reason="continue_final_message",
        )
        return
    again = renderer.encode(text)
    in_prompt = common_prefix_len(sampled, again) < len(prompt)  # the prompt itself is written otherwise
    f = found.compare(
        sim.scenario.id,
        sampled,
        again,
        f"continuing assistant message {index} cut after {len(ids)} sampled tokens in its {where}: the re-rendered "
        "context is not the prompt and the ids sampled so far",
        cls="generation_prompt" if in_prompt else None,
    )
    if f is not None:
        f.reason = "continue_final_message"


def _cut(renderer: Any, body: list[int], completion: str, inside: str) -> tuple[list[int], str] | None:
    """Where to cut a sampled turn so that the cut falls inside ``inside`` (its answer, or the reasoning it carries):
    from the token where ``inside`` is half written on, the ids and their text. None when ``inside`` is not found
    in the completion or no cut falls inside it."""
    start = completion.find(inside[: max(1, min(8, len(inside)))])
    if start < 0:
        return None
    first = max(1, min(len(body) - 1, len(body) * (start + len(inside) // 2) // max(1, len(completion))))
    for k in range(first, min(len(body), first + _TRIES)):  # a few cuts from there on (each is one decode)
        text = renderer.decode(body[:k])
        if start + 1 < len(text) < start + len(inside) and inside.startswith(text[start:]):
            return body[:k], text
    return None
