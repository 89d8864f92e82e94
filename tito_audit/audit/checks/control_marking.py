"""control_marking: the answer a loop that marks control-token text would get, where it is not the verdict's.

The verdict is earned on the path a loop that calls ``apply_chat_template`` as usual takes: the render encoded
plainly, samples encoded as the model emits them (``<think>`` one control token where the vocabulary holds it). A
loop can also mark control-token text in the conversation (``apply_chat_template(..., sanitize_control_tokens=True)``,
``tito_audit.Trajectory``): the template then sees ``<think>`` wrapped in private-use markers, so a template that tests
``content.startswith('<think>')`` takes the other branch. Each scenario whose conversation holds control-token text
is played that way too, and where its answer differs (a tool append that breaks, a re-render that diverges) both
answers are reported, with the assumption each rests on: ``only_with_marking`` (marking breaks what a plain
loop keeps exact) or ``only_without_marking`` (the verdict's break, which marking avoids), as the reasons
``avoid:only_with_marking`` / ``avoid:only_without_marking``. ``n/a`` where no played conversation holds
control-token text, or under ``--renderer`` (a library renders its own ids).

**Example** (``Qwen/Qwen3-0.6B``: ``the same answers with and without control-token marking (9 episodes with
control text)``). A template of ours that drops reasoning from an earlier turn only where it does not lead the
content (``tests/data/marking/think_elsewhere_dropped.jinja``, on Qwen3's tokenizer): a plain loop's history is
never rewritten (verdict ``safe``), a marking loop's is, ``inline_think/plain``, class ``history_rewrite``:
``buffer + delta breaks only with control-token marking (...): appending after assistant message 1 rewrites the
history there, while a plain apply_chat_template loop (no marking, the verdict's path) keeps it exact``.

    marked history   151644 '<|im_start|>' 77091 'assistant' 198 '\n' | 13708 '<th' 766 'ink' 29 '>' 198 '\n'
    marked append    151644 '<|im_start|>' 77091 'assistant' 198 '\n' | 1406 '\n\n\n' 151657 '<tool_call>'
"""

from __future__ import annotations

from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector, divergence
from tito_audit.audit.context import AuditContext
from tito_audit.audit.simulation import Simulation
from tito_audit.rendering.tokenizer_cache import tokenizer_cache
from tito_audit.report.findings import Finding, Outcome

MARKING = "control-token marking (sanitize_control_tokens=True, as tito_audit.Trajectory renders)"
PLAIN = "a plain apply_chat_template loop (no marking, the verdict's path)"


def _holds_control_text(ctx: AuditContext, sim: Simulation) -> bool:
    """Marking can change what the template sees: some string of the conversation holds an added token's text."""
    return tokenizer_cache(ctx.tokenizer).any_mentions_added_tokens(sim.messages)


def _breaks(sim: Simulation) -> set[int]:
    """The assistant messages after which an append breaks buffer + delta."""
    return {idx for idx, _ in sim.bridge_errors}


def _rerender_exact(sim: Simulation) -> bool:
    return sim.trajectory is not None and list(sim.trajectory.input_ids) == list(sim.naive_ids)


@check(
    id="control_marking",
    title="Rendering with and without control-token marking",
    severity="warning",
    order=27,
    verdict="caveat",
    explanation="""
The verdict is earned as a loop that calls `apply_chat_template` as usual renders: the render encoded plainly, and
samples encoded as the model emits them. A loop that marks control-token text in the conversation
(`sanitize_control_tokens=True`, as `tito_audit.Trajectory` does) shows the template `<think>` wrapped in markers,
so a template that tests `content.startswith('<think>')` takes its other branch. Every scenario whose conversation
holds control-token text is played that way too; where buffer + delta or naive re-rendering gets another answer,
both are reported: `only_with_marking` (marking breaks what a plain loop keeps exact) or `only_without_marking`
(the verdict's break, which marking would avoid).""",
    fix_hint="""
Render in training as the loop renders in rollouts: the same `sanitize_control_tokens` setting on both sides. Where
marking breaks the template, mark only environment messages (tool results, user text), never the assistant's own
text; where only marking keeps it exact, mark in both places or patch the template's test (`tito-audit fix`).""",
)
def control_marking(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "control_marking")
    if not ctx.engine.is_template:
        return Outcome(not_applicable=f"renderer {ctx.engine.name} renders its own ids: no marking to compare")
    for sim in ctx.ok_simulations():
        if not _holds_control_text(ctx, sim):
            continue
        marked = ctx.marked_simulation(sim.scenario)
        if marked.error is not None:
            found.failed(sim.scenario.id, marked.error)
            continue
        if not marked.ok:
            continue
        found.compared()
        _compare_appends(found, sim, marked)
        if "special_text" not in sim.scenario.tags:  # marked tool text vs plain re-encoding: special_token_injection
            _compare_rerender(found, sim, marked)
    summary = (
        f"the same answers with and without control-token marking ({found.comparisons} episodes with control text)"
        if not found.findings
        else found.findings[0].message
    )
    return found.outcome(summary, "no played conversation holds control-token text")


def _keep(found: Collector, sim: Simulation, expected: Any, actual: Any, message: str) -> Finding | None:
    """A finding at the first token where ``actual`` departs from ``expected`` (the episode is counted once, by
    ``control_marking``)."""
    return found.keep(divergence(found.ctx, found.check, sim.scenario.id, expected, actual, message))


def _compare_appends(found: Collector, sim: Simulation, marked: Simulation) -> None:
    """A tool or user append that breaks buffer + delta on one path only, shown where it breaks."""
    plain_breaks, marked_breaks = _breaks(sim), _breaks(marked)
    sides = (
        (
            marked,
            marked_breaks - plain_breaks,
            "only_with_marking",
            "breaks only with {m}: appending after assistant "
            "message {i} rewrites the history there, while {p} keeps it exact",
        ),
        (
            sim,
            plain_breaks - marked_breaks,
            "only_without_marking",
            "is exact only with {m}: in {p} appending after assistant message {i} rewrites the history",
        ),
    )
    for broken, only, reason, how in sides:
        for idx in sorted(only):
            error = dict(broken.bridge_errors)[idx]
            message = "buffer + delta " + how.format(m=MARKING, p=PLAIN, i=idx)
            f = _keep(found, sim, error.before, error.after, message)
            if f is not None:
                f.reason = reason


def _compare_rerender(found: Collector, sim: Simulation, marked: Simulation) -> None:
    """Naive re-rendering that reproduces the buffer on one path only."""
    plain_exact, marked_exact = _rerender_exact(sim), _rerender_exact(marked)
    if plain_exact == marked_exact:
        return
    broken = marked if plain_exact else sim
    assert broken.trajectory is not None
    where = f"only with {MARKING}" if plain_exact else f"in {PLAIN}, and is exact only with {MARKING}"
    f = _keep(
        found,
        sim,
        broken.trajectory.input_ids,
        broken.naive_ids,
        f"naive re-rendering diverges from the buffer {where}",
    )
    if f is not None:
        f.reason = "only_with_marking" if plain_exact else "only_without_marking"
