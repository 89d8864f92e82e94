"""Engine and trainer renderers compared: where the tokens the engine's model saw and sampled part from the
trainer's re-render of the same conversation.

Every scenario the engine played (its simulation: the conversation in the shape the engine accepts) is given to
the trainer as it is. For each assistant turn, the engine's context is the engine's prompt for that turn (its
render of the history with the generation prompt) followed by the ids the model sampled (up to the stop token);
the trainer re-renders the history up to and including that turn. They agree on the turn when the trainer's ids
start with the engine's context (text the trainer writes after the stop is never sampled). The first turn that
disagrees is the scenario's finding, at the first divergent token; it says whether the engine's own re-render
parts there the same way (then the engine rewrites its own history or generation prompt: not the pair's doing).
A scenario the engine could not play, or the trainer could not render, is listed with the reason and never
counted as agreeing: every scenario is either compared or listed (control-token text in content included: an
engine and a trainer that encode it differently, one as text and one as control tokens, part there).

The result is one check (``renderer_pair``) added to the report when ``--train-renderer`` is given: it is not in
the registry (it has nothing to compare without a trainer), and a divergence makes the verdict at least
``tito-required`` (a trainer that re-renders trains on tokens the engine never produced: keep the engine's ids).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tito_audit.audit.checks.base import CheckSpec
from tito_audit.audit.collector import Collector
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.rollout.tokens import common_prefix_len

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

_SHOWN = 24  # characters of text shown on each side of a divergence


def _compare(ctx: AuditContext) -> Outcome:
    assert ctx.trainer is not None and ctx.trainer_renderer is not None
    engine_name, trainer_name = ctx.engine.name, ctx.trainer.name
    found = Collector(ctx, PAIR.id)
    not_compared: dict[str, str] = {}
    agree: list[str] = []
    first: list[dict[str, Any]] = []
    turns = 0
    for sim in ctx.simulations:
        sid = sim.scenario.id
        if not sim.ok:
            not_compared[sid] = f"{engine_name} could not play it: {sim.error.message if sim.error else '?'}"
            continue
        engine = ctx.renderer_for(sim.scenario)
        trainer = (
            ctx.trainer_renderer.with_kwargs(**sim.scenario.kwargs) if sim.scenario.kwargs else ctx.trainer_renderer
        )
        tools = list(sim.scenario.tools)
        divergence = None
        for n, turn in enumerate(sim.turns):
            try:
                prompt = engine.render_ids(sim.messages[: turn.index], tools=tools, add_generation_prompt=True)
                context = prompt + list(turn.sampled_ids)
                retrained = trainer.render_ids(sim.messages[: turn.index + 1], tools=tools)
            except RenderError as err:
                found.failed(sid, err)
                not_compared[sid] = f"{trainer_name} could not render turn {n + 1}: {err.message}"
                divergence = None
                break
            turns += 1
            seen = retrained[: len(context)]
            if seen == context:
                continue
            at = common_prefix_len(context, seen)
            where = "prompt" if at < len(prompt) else "sampled"
            try:  # the engine's own re-render: does it part from its context at the same token?
                own = engine.render_ids(sim.messages[: turn.index + 1], tools=tools)[: len(context)]
                itself = common_prefix_len(context, own) == at and own[at : at + 1] == seen[at : at + 1]
            except RenderError:
                itself = False
            divergence = (n, turn, context, seen, at, where, itself)
            break
        if sid in not_compared:
            continue
        if divergence is None:
            found.compared()
            agree.append(sid)
            continue
        n, turn, context, seen, at, where, itself = divergence
        engine_piece, trainer_piece = _piece(ctx, context, at), _piece(ctx, seen, at)
        part = "the prompt the engine rendered" if where == "prompt" else "the ids the engine's model sampled"
        message = (
            f"turn {n + 1} (message {turn.index}): {trainer_name} re-renders token {at} of {len(context)} in "
            f"{part} as {trainer_piece!r}, {engine_name} had {engine_piece!r}"
        ) + (f" ({engine_name}'s own re-render does the same)" if itself else "")
        found.compare(sid, context, seen, message)
        first.append(
            {
                "scenario": sid,
                "turn": n + 1,
                "message_index": turn.index,
                "token_index": at,
                "context_tokens": len(context),
                "in": where,
                "engine_rerender_too": itself,
                "engine_token": engine_piece,
                "trainer_token": trainer_piece,
                "engine_text": _around(ctx, context, at),
                "trainer_text": _around(ctx, seen, at),
            }
        )
    compared = len(agree) + len(first)
    own_too = sum(1 for d in first if d["engine_rerender_too"])
    data: dict[str, Any] = {
        "engine": engine_name,
        "trainer": trainer_name,
        "scenarios_compared": compared,
        "scenarios_agree": len(agree),
        "scenarios_diverge": len(first),
        # of those, where the engine's own re-render parts from its context at the same token (a history rewrite
        # or generation prompt of the engine itself, which naive_rerender/history_rewrite report), not the pair
        "scenarios_diverge_engine_too": sum(1 for d in first if d["engine_rerender_too"]),
        "turns_compared": turns,
        "first_divergences": first,
        "not_compared": not_compared,
    }
    summary = (
        f"{trainer_name} re-renders {engine_name}'s context exactly in all {compared} scenarios ({turns} turns)"
        if not first
        else f"{trainer_name} departs from {engine_name}'s context in {len(first)} of {compared} scenarios"
        + (f" ({own_too} where {engine_name}'s own re-render does too)" if own_too else "")
    )
    if not_compared:
        summary += f"; {len(not_compared)} not compared"
    return found.outcome(summary, f"no scenario could be compared between {engine_name} and {trainer_name}", data)


def _piece(ctx: AuditContext, ids: list[int], at: int) -> str:
    return ctx.renderer.decode(ids[at : at + 1], skip_special_tokens=False) if at < len(ids) else "(end)"


def _around(ctx: AuditContext, ids: list[int], at: int) -> str:
    """The text just before and after the divergent token, ``⟨`` marking it."""
    before = ctx.renderer.decode(ids[max(0, at - 12) : at], skip_special_tokens=False)[-_SHOWN:]
    after = ctx.renderer.decode(ids[at : at + 12], skip_special_tokens=False)[:_SHOWN]
    return f"{before}⟨{after}"


PAIR = CheckSpec(
    id="renderer_pair",
    title="Engine and trainer renderers agree",
    severity="error",
    explanation=(
        "The engine samples under one renderer and the trainer re-renders the conversation with another. This "
        "plays every scenario under the engine and compares, per assistant turn, the engine's context (its prompt "
        "plus the sampled ids) with the trainer's re-render of the same messages, at the first divergent token. "
        "Where they differ, a trainer that re-renders computes the loss on tokens the engine never produced."
    ),
    fix_hint=(
        "Train on the engine's token ids (a token buffer) instead of re-rendering, or make the trainer render with "
        "the engine's renderer."
    ),
    run=_compare,
    order=1000,
    verdict="tito-required",
)
