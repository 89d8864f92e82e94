r"""tool_append_prefix: appending tool results is token-prefix-preserving (what TITO needs).

It renders ``[..., assistant(tool_calls)]``, then renders it again with the tool result(s) appended (and the
generation prompt), and compares the two token for token up to the assistant's stop token, on a minimal probe (as
TRL's ``is_chat_template_prefix_preserving`` does) and in every simulated tool episode. On the nine shared models
this agrees with TRL's verdict wherever TRL gives one (``tests/audit/test_shared_models.py``), and gives one where
TRL's check raises (Mistral-Nemo's id format, Gemma-2's role alternation). A stop the template writes inside the
assistant message, before its own calls or answer (a reasoning block closed by the turn end, then the answer in a
turn of its own), is a finding of its own (``unsafe:stop_inside_turn``): the engine ends the turn there, and a
delta after it would hand the rest of the model's message to the environment.

Only the tool results of an append block are judged: a system notice appended with them, or a block that holds no
tool result, is ``history_rewrite``'s (``tito-required``) and ``append_matrix``'s concern, also where the template
needs tool results as user turns
(``adapt:tool_as_user``): the user turn a scenario's leading tool results became is the tool part, a user turn of
the scenario's own is not.

**Example** (``Qwen/Qwen3-0.6B``, ``probe/minimal``, class ``history_rewrite``, first divergent token 9): the
template emits an empty think block only on the last assistant turn, so appending the tool result drops it.

    buffered     151644 '<|im_start|>' 77091 'assistant' 198 '\n' | 151667 '<think>' 271 '\n\n' 151668 '</think>' ...
    re-rendered  151644 '<|im_start|>' 77091 'assistant' 198 '\n' | 151657 '<tool_call>' 198 '\n' 4913 '{"' ...

**Example** (``microsoft/Phi-3-mini-4k-instruct``, ``probe/configured-stop``, class ``stop_seam``, first divergent
token 14): ``an engine stops only on '<|endoftext|>' (the turn end '<|end|>' is in neither the tokenizer's eos nor
generation_config), so the buffer keeps what the template writes after the turn, which it drops once a tool
result follows``.

    buffered     13 '\n' 32007 '<|end|>' 29871 '' 13 '\n' | 32000 '<|endoftext|>'
    re-rendered  13 '\n' 32007 '<|end|>' 29871 '' 13 '\n' | 32001 '<|assistant|>' 29871 '' 13 '\n'
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector, divergence
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Finding, Outcome
from tito_audit.rollout.bridge import BridgeError, compute_bridge
from tito_audit.rollout.payloads import only_later_calls
from tito_audit.rollout.probes import MINIMAL_TOOL_EPISODE, MINIMAL_TOOL_RESULT
from tito_audit.rollout.stop import stop_token_ids


@check(
    id="tool_append_prefix",
    title="Tool appends preserve the token prefix",
    severity="error",
    order=20,
    verdict="unsafe",
    explanation="""
TITO keeps the sampled ids and appends only the token delta of new messages. That delta exists only if the
template renders the history identically once tool results are appended (up to the assistant's stop token).
When it does not, no delta is correct: the buffer and every later prompt disagree with what the template
would show the model, and the gradient is computed on a context the model never sees at inference. The cut is
the engine's stop token; when only the template (not the tokenizer's eos or generation_config) ends the turn,
an engine samples on to the eos, and what the template writes after the turn must survive the append too.
Only the tool results of an append block are judged here (where the template needs them as user turns, the user
turn they became); a rewrite that system or user messages appended with them, or without them, make is
`history_rewrite`'s (the verdict is then `tito-required`), and templates that drop tool messages altogether are
`tool_support`'s.""",
    fix_hint="""
Patch the template so an assistant turn renders the same whether or not it is the last message (for example
emit the empty `<think></think>` block on every turn, not only the last: `tito-audit fix`), or freeze the
rewritten prefix as prompt (loss 0) and start a new sample at each rewrite. When the turn end is not a
configured stop, add it to generation_config.json's `eos_token_id` (and the engine's stop list).""",
)
def tool_append_prefix(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "tool_append_prefix")
    try:
        compute_bridge(ctx.renderer, MINIMAL_TOOL_EPISODE, MINIMAL_TOOL_RESULT, None, ctx.stop_ids)
        found.compared()
    except BridgeError as exc:
        found.compare("probe/minimal", exc.before, exc.after, exc.reason)
    except RenderError as err:
        found.failed("probe/minimal", err)  # strict templates reject the bare probe; the scenarios still decide
    found.keep(_configured_stop_seam(ctx))
    for sim in ctx.ok_simulations():
        for idx, _, results, error in judged_appends(ctx, sim):
            if error is None:  # no tool result leads the block, or the rewrite comes from a system or user
                continue  # message in the same block: a system or user append, history_rewrite's
            if error.inside_turn is not None:  # no rewrite: the engine's stop cuts the turn before its calls
                if only_later_calls(sim.messages[idx], error.inside_turn):
                    continue  # one call per turn: tool_forms names the parallel form to avoid
                cut = found.compare(
                    sim.scenario.id, error.before, error.after, f"assistant message {idx}: {error.reason}", "stop_seam"
                )
                if cut is not None:
                    cut.reason = "stop_inside_turn"
                continue
            found.compare(
                sim.scenario.id,
                error.before,
                error.after,
                f"appending {'+'.join(m['role'] for m in results)} after assistant message {idx} rewrites the history",
            )
        found.compared(len(sim.trajectory.bridges) if sim.trajectory is not None else 0)
    for f in found.findings:
        f.reason = f.reason or "rewrites_on_tool_append"
    episodes = found.comparisons
    summary = (
        f"prefix preserved in {episodes} tool appends"
        if not found.findings
        else f"tool appends break buffer + delta ({len(found.findings)} episode(s))"
    )
    return found.outcome(summary, "no tool conversation renders with this template")


def judged_appends(
    ctx: AuditContext, sim: Any
) -> Iterator[tuple[int, BridgeError, list[dict[str, Any]], BridgeError | None]]:
    """``sim``'s refused appends, in order, each with its leading tool results and the break they alone make
    (``_tool_append``; None where the block has no leading tool result, or where appending only its results is fine:
    the rewrite comes from a system or user message appended with them), but the append after the assistant turn
    that follows a rewrite a system, user or developer message in its block caused (``history_rewrite``'s). That
    turn's sampled ids were read off a prompt whose history the template rewrote, not off its own render's
    (``simulation.derive_turn``), so a break at its append is the rewrite's consequence, not one of its own: the
    append after it was judged an engine's stop inside the turn where the template rewrites nothing on a tool append
    (red team 18's e4). The appends after that turn are judged again: their turns' prompts are renders of their
    own."""
    skip: int | None = None
    for idx, bridge_error in sim.bridge_errors:
        if idx == skip:
            continue
        results, error = _tool_append(ctx, sim, idx, bridge_error)
        yield idx, bridge_error, results, error
        if error is None:  # the assistant turn after this block (past the end where none follows)
            skip = idx + 1 + len(append_block(sim.messages, idx))


def _tool_append(
    ctx: AuditContext, sim: Any, idx: int, error: BridgeError
) -> tuple[list[dict[str, Any]], BridgeError | None]:
    """The tool results that lead the block appended after assistant message ``idx``, and the break they alone make,
    as this check judges it. The counterexample search's property and ``history_rewrite`` ask the same
    (``judged_appends``), so that what the search calls an append break is one this check reports."""
    block = append_block(sim.messages, idx)
    results = _tool_results(sim, idx, block)
    return results, (_tool_only_error(ctx, sim, idx, block, results, error) if results else None)


def append_block(messages: list[dict[str, Any]], idx: int) -> list[dict[str, Any]]:
    """The environment messages appended after assistant message ``idx``, up to the next assistant turn."""
    block: list[dict[str, Any]] = []
    for m in messages[idx + 1 :]:
        if m["role"] == "assistant":
            break
        block.append(m)
    return block


def _leading_tools(block: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in block:
        if m["role"] != "tool":
            break
        out.append(m)
    return out


def _tool_results(sim: Any, idx: int, block: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool results that lead the block appended after assistant message ``idx``, as played: its leading tool
    messages, or, where the template needs results as user turns (``tool_as_user``, which merges a run of results
    into one user message), that user message where the scenario's block starts with a tool result. A block that
    starts with a system or user message of the scenario's own has none."""
    leading = _leading_tools(block)
    if leading or "tool_as_user" not in sim.adapters or not block or block[0]["role"] != "user":
        return leading
    original = sim.scenario.messages_list()
    turn = sum(1 for m in sim.messages[: idx + 1] if m["role"] == "assistant")  # adapters keep assistant turns
    turns = [i for i, m in enumerate(original) if m["role"] == "assistant"]
    if turn > len(turns):
        return []
    sent = append_block(original, turns[turn - 1])
    return block[:1] if sent and sent[0]["role"] == "tool" else []


def _tool_only_error(
    ctx: AuditContext,
    sim: Any,
    idx: int,
    block: list[dict[str, Any]],
    tools_only: list[dict[str, Any]],
    error: BridgeError,
) -> BridgeError | None:
    """The break when only the block's tool results (``tools_only``, its first messages) are appended; None when
    those alone are fine."""
    if len(tools_only) == len(block):
        return error
    try:
        compute_bridge(
            ctx.renderer_for(sim.scenario), sim.messages[: idx + 1], tools_only, list(sim.scenario.tools), ctx.stop_ids
        )
    except BridgeError as exc:
        return exc
    except RenderError:
        return error
    return None


def _configured_stop_seam(ctx: AuditContext) -> Finding | None:
    """The probe again, cut where an engine stops with only the model's shipped stop ids.

    Our stop set adds the template's own turn-end token. When the tokenizer's eos and generation_config do not
    list it, an engine keeps sampling past it, so the buffer also holds what the template writes after it for a
    final turn; that text must survive the append too (it is what TRL's prefix check compares).
    """
    configured = stop_token_ids(ctx.tokenizer, None, ctx.model.generation_eos_ids)
    if not configured or set(ctx.stop_ids) <= set(configured):
        return None
    try:
        compute_bridge(ctx.renderer, MINIMAL_TOOL_EPISODE, MINIMAL_TOOL_RESULT, None, configured)
    except BridgeError as exc:
        names = ", ".join(repr(t) for t in ctx.tokenizer.convert_ids_to_tokens(list(configured)))
        turn_end = ", ".join(
            repr(t) for t in ctx.tokenizer.convert_ids_to_tokens([i for i in ctx.stop_ids if i not in configured])
        )
        return divergence(
            ctx,
            "tool_append_prefix",
            "probe/configured-stop",
            exc.before,
            exc.after,
            f"an engine stops only on {names} (the turn end {turn_end} is in neither the tokenizer's eos nor "
            "generation_config), so the buffer keeps what the template writes after the turn, which it drops "
            "once a tool result follows",
            cls="stop_seam",
        )
    except RenderError:
        return None
    return None
