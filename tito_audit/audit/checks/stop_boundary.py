r"""stop_boundary: what the engine stops on versus what the template renders around it.

Findings: turns closed by a token that is neither the tokenizer's eos nor in ``generation_config`` (an engine
stopping on eos runs past the turn), turns rendered without any stop token, a token spanning the generation prompt
and the completion, and a buffer/delta seam that is not atomic (encoding the joined text gives other ids). Text the
template writes after the stop token (Qwen's ``\n`` after ``<|im_end|>``) is a note, not a finding: the delta
starts with it. The turn end is where the template closes an assistant turn, outside every content and argument
slot; the summary names the stop convention (``after turn``, or ``next opener`` for a template like GLM's that
closes no turn: the stop is the next turn's opener, which is then the delta's first token, not a seam), and a turn
end the tokenizer splits is a finding (no engine stops on it). See [control-tokens.md](../control-tokens.md). If
the engine runs past the turn end, the model is trained on text after its own stop.

**Example** (``google/gemma-2-2b-it``, ``probe/turn_end``, class ``stop_seam``): ``turns end with '<end_of_turn>'
but the tokenizer's eos is '<eos>' and no generation_config lists the turn end: an engine stopping on eos runs past
the turn``. ``mistralai/Mistral-Nemo-Instruct-2407``, ``single_call/cjk`` (first divergent token 5): ``the
buffer/delta seam is not atomic: encoding the joined text gives other ids`` — in the delta after the stop token,
the space and the first bytes of a CJK tool result are separate ids, while encoding the joined text merges them.

    buffer + delta  7 '[TOOL_RESULTS]' 19227 '{"' 5431 'content' 2811 '":' | 1032 ' ' 4343 (bytes of 1 character)
    encoded text    7 '[TOOL_RESULTS]' 19227 '{"' 5431 'content' 2811 '":' | 42120 ' '+byte 61690 (bytes)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.audit.simulation import Simulation, Turn
from tito_audit.report.findings import Finding, Outcome
from tito_audit.report.quote import quoted
from tito_audit.rollout.payloads import only_later_calls
from tito_audit.rollout.stop import single_token, split_turn_ends, stop_convention
from tito_audit.rollout.turn_roles import ANSWER, CALL, MIXED, NEXT_OPENER, turn_roles


@check(
    id="stop_boundary",
    title="Stop-token seam",
    severity="warning",
    order=40,
    merge_dependent="the seam's atomicity depends on how the real merges split multi-byte and prefix-space text, "
    "and its eos finding on shipped metadata (agreed on 15 of 16 models)",
    explanation="""
An engine stops on a token and returns it; the template may render more after it (Qwen's `\\n` after
`<|im_end|>`), close turns with a token that is not the tokenizer's eos (Gemma's `<end_of_turn>`), or not
render the stop token at all. The bridge must start exactly where sampling stopped, and the seam between the
buffer and the delta must be made of atomic special tokens or concatenating ids differs from encoding text.""",
    fix_hint="""
Configure the engine's stop ids from the template's turn-end token (generation_config `eos_token_id`), start
each bridge right after the sampled stop token (include the template's trailing text in the delta), and keep
the stop token inside the loss mask.""",
)
def stop_boundary(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "stop_boundary")
    roles = turn_roles(ctx.renderer)
    convention = stop_convention(ctx.renderer, ctx.model.generation_eos_ids)
    found.findings += _uncovered_turn_ends(ctx)
    found.findings += _split_turn_ends(ctx)
    seen = _Seen()
    for sim in ctx.ok_simulations():
        for turn in sim.turns:
            found.findings += seen.turn(ctx, sim, turn)
        _seams(ctx, sim, found, seen)
    notes = [seen.per_call] if seen.per_call else []
    notes += [
        f"renders {quoted(text)} after the stop token (never sampled; the delta starts with it)"
        for text in seen.trailing
    ]
    notes += _convention_notes(convention, roles.convention_of(CALL), seen.deferred)
    unique: dict[str, Finding] = {}
    for f in found.findings:
        unique.setdefault(f.message, f)
    tok = ctx.tokenizer
    stops = ", ".join(repr(tok.convert_ids_to_tokens(i)) for i in ctx.stop_ids)
    summary = f"stops on {stops}" + (f" ({convention.replace('_', ' ')})" if convention else "")
    summary += f"; {notes[0]}" if notes else ""
    if unique:
        summary = next(iter(unique.values())).message
    return Outcome(
        list(unique.values()),
        summary,
        data={
            "stop_tokens": [tok.convert_ids_to_tokens(i) for i in ctx.stop_ids],
            "stop_convention": convention,
            "turn_ends": list(roles.turn_ends),
            "by_turn_kind": {k: {"convention": roles.convention_of(k), "end": roles.end_of(k)} for k in (ANSWER, CALL)},
            "trailing_after_stop": sorted(seen.trailing),
            "notes": notes,
        },
        comparisons=seen.compared,
    )


@dataclass
class _Seen:
    """What the played turns showed about the stop, beyond findings: how many were compared, a parallel-call
    note, the text rendered after the stop (each with the first scenario it showed in), and whether the template
    writes the turn end only once another message follows."""

    compared: int = 0
    per_call: str = ""
    trailing: dict[str, str] = field(default_factory=dict)
    deferred: bool = False

    def turn(self, ctx: AuditContext, sim: Simulation, turn: Turn) -> list[Finding]:
        """The findings of one played assistant turn: no stop rendered, or a stop written inside the message."""
        self.compared += 1
        out: list[Finding] = []
        if not turn.stop_rendered:
            out.append(
                Finding(
                    "stop_boundary",
                    sim.scenario.id,
                    "stop_seam",
                    f"the template renders no stop token after assistant message {turn.index}; "
                    "the buffer holds a sampled stop the re-rendered history lacks",
                )
            )
        elif turn.cut_text and only_later_calls(sim.messages[turn.index], turn.cut_text):
            self.per_call = self.per_call or (
                f"writes each parallel tool call as a turn of its own, closed by {_stop(ctx, turn)!r}: an engine "
                "samples one call per turn (tool_forms)"
            )
        elif turn.cut_text:
            out.append(
                Finding(
                    "stop_boundary",
                    sim.scenario.id,
                    "stop_seam",
                    f"the template writes the stop {_stop(ctx, turn)!r} inside assistant message {turn.index}, before "
                    f"{quoted(turn.cut_text)} of the same message: an engine ends the turn there and never samples "
                    "the rest",
                )
            )
        elif turn.trailing_text:
            self.trailing.setdefault(turn.trailing_text, sim.scenario.id)
        self.deferred = self.deferred or turn.stop_deferred
        if turn.seam_merged:
            out.append(
                Finding(
                    "stop_boundary",
                    sim.scenario.id,
                    "stop_seam",
                    f"a token spans the generation prompt and the completion of message "
                    f"{turn.index}: prompt ids + sampled ids differ from encoding the text",
                )
            )
        return out


def _stop(ctx: AuditContext, turn: Turn) -> str:
    return str(ctx.tokenizer.convert_ids_to_tokens(turn.stop_id))


def _split_turn_ends(ctx: AuditContext) -> list[Finding]:
    """Turn ends this tokenizer splits into several tokens: no engine stops on them."""
    return [
        Finding(
            "stop_boundary",
            "probe/turn_end",
            "stop_seam",
            f"the template ends turns with {text!r}, which this tokenizer splits into "
            f"{len(ctx.renderer.encode(text))} tokens: no engine stops on it (a tokenizer that is not the "
            "template's own?)",
        )
        for text in split_turn_ends(ctx.renderer)
    ]


def _seams(ctx: AuditContext, sim: Simulation, found: Collector, seen: _Seen) -> None:
    """Each buffer/delta seam at a stop token must be atomic: encoding the joined text gives the same ids. The
    window starts at the stop token: nothing merges across an added token, so only the seam counts."""
    traj = sim.trajectory
    if traj is None:
        return
    for seg in [s for s in traj.segments if s.kind == "bridge"]:
        left = traj.input_ids[seg.start - 1 : seg.start] if seg.start else []
        if not left or left[0] not in ctx.stop_ids:
            continue
        right = _whole_characters(ctx, traj.input_ids[seg.start : seg.start + 6])
        seen.compared += 1
        joined = ctx.renderer.encode(_decoded(ctx, left + right))
        if joined != left + right:
            found.compare(
                sim.scenario.id,
                left + right,
                joined,
                "the buffer/delta seam is not atomic: encoding the joined text gives other ids",
                cls="stop_seam",
            )


def _decoded(ctx: AuditContext, ids: list[int]) -> str:
    return str(ctx.renderer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def _whole_characters(ctx: AuditContext, ids: list[int]) -> list[int]:
    """``ids`` less the trailing ones that end inside a multi-byte character (a window cut there decodes to U+FFFD,
    which encodes to other ids whatever the seam is)."""
    while ids and _decoded(ctx, ids).endswith("\ufffd"):
        ids = ids[:-1]
    return ids


def _convention_notes(convention: str, call_convention: str, deferred: bool) -> list[str]:
    """What the stop convention means for the next message's delta."""
    if convention == NEXT_OPENER:
        return [
            "no turn end of its own: the next turn's opener is the stop, and the next message's delta "
            "starts after the sampled one"
        ]
    if convention == MIXED:
        return [
            "tool-call turns have no turn end of their own: the tool result's opener is their stop"
            if call_convention == NEXT_OPENER
            else "answers have no turn end of their own: the next user turn's opener is their stop"
        ]
    if deferred:
        return [
            "writes the turn end only once another message follows: the next message's delta starts "
            "after the sampled one"
        ]
    return []


def _uncovered_turn_ends(ctx: AuditContext) -> list[Finding]:
    """Turn ends (per kind of turn: an answer's, a tool-call turn's, or the opener such a turn stops at) that the
    model's shipped metadata does not list as a stop: neither the tokenizer's eos nor generation_config's
    ``eos_token_id`` is one of the words that close such a turn (``TurnRoles.closers_of``). An engine configured
    from that metadata runs past such a turn."""
    tok, roles = ctx.tokenizer, turn_roles(ctx.renderer)
    shipped = {i for i in (tok.eos_token_id, *ctx.model.generation_eos_ids) if i is not None}
    ends = {kind: roles.end_of(kind) for kind in (ANSWER, CALL)}
    out: list[Finding] = []
    for kind, word in ends.items():
        tid = single_token(tok, word) if word else None
        if tid is None or (kind == CALL and word == ends[ANSWER]):
            continue
        if any(single_token(tok, w) in shipped for w in roles.closers_of(kind)):
            continue  # an engine stops within the turn's closing run: the delta starts after the stop it meets
        whose = "turns" if ends[ANSWER] == ends[CALL] else ("answers" if kind == ANSWER else "tool-call turns")
        what = (
            f"{whose} end at the next turn's opener"
            if roles.convention_of(kind) == NEXT_OPENER
            else f"{whose} end with"
        )
        if ctx.model.generation_eos_ids:
            listed = ", ".join(repr(t) for t in tok.convert_ids_to_tokens(list(ctx.model.generation_eos_ids)))
            why = (
                f"neither the tokenizer's eos {tok.eos_token!r} nor generation_config's eos_token_id ({listed}) "
                "lists it: an engine stopping on those runs past the turn"
            )
        else:
            why = (
                f"the tokenizer's eos is {tok.eos_token!r} and no generation_config lists the turn end: an engine "
                "stopping on eos runs past the turn"
            )
        out.append(Finding("stop_boundary", "probe/turn_end", "stop_seam", f"{what} {word!r} but {why}"))
    return out
