"""Environment tokens logged as sampled: ids a loop logged, and trained, as the policy's samples that the
environment wrote (issue 38, item 2).

A loop that appends a tool result to the next turn's response ids (with log-prob 0.0, or none) and trains the
whole response trains the policy on tokens it never sampled. Its log can still be self-consistent: the engine's
prompts, the sampled turns and the trained sequence agree, so the TITO check alone finds it exact. Four kinds of
evidence name it, from the log and the template alone (no weights):

- **the template's render**: a sampled turn's ids hold the template's rendering of a non-assistant message of the
  episode (a tool result, a user message, the system prompt), as the template writes it after the messages before
  it: at least ``COVER`` of its ids in one contiguous run, with every control token of it that is not a stop token
  (its role header): a policy ends its turn at a stop token and does not write the next message's header, a loop
  that glues the environment's delta to the next turn's ids does. A rendering without such a control token must
  appear whole. Needs the episode's messages and renders (not ``--only-tito``).
- **impossible log-probs**: a sampled turn whose first ids carry log-prob exactly 0.0 (the engine's probability 1:
  on a vocabulary of thousands, a fill value, not a sample) while its later ids carry real ones, or a turn with no
  log-probs while the episode's other turns have them, when those ids hold one of the template's header tokens
  (``ReplayContext.header_ids``: the control tokens it opens a message with, no stop and no BOS). A run of 0.0 alone
  is not evidence: a confident model's log-probs round to exactly 0.0 on long verbatim copies. The mirror, a turn
  whose last ids carry 0.0 over a header and the rest real ones, is a message glued after a turn cut before its
  stop (through that message's own stop, which the reading below cannot see); not where the policy writes a header
  itself with a real log-prob (harmony's ``<|start|>`` between channels).

- **a stop inside a sampled turn**: an engine ends a turn at its stop token, so a sampled turn holds one only as its
  last id. One earlier, with the template's header token after it (the next message opened) or before it (the turn
  begins with a message the environment wrote), is a loop that glued the environment's delta to the policy's
  ids: the environment's run is the turn's start up to that stop when a header precedes it, else what follows it.
  Needs neither the messages nor log-probs.
- **a turn that opens with a message**: its first id is a control token of a user message or tool result as the
  template writes them before an assistant turn, and it holds, later, that message's end (``ReplayContext.openings``):
  the environment's delta, glued before the policy's ids. Mistral's ``[INST]...[/INST]`` and
  ``[TOOL_RESULTS]...[/TOOL_RESULTS]`` hold no stop token, so the stop reading cannot see them; this one does, from
  the ids alone.

- **ids after the stop**: what a sampled turn holds after its first stop token, with no header beside it (the
  reading above names those): a pad, a second stop, a newline the template writes after the turn's end, glued by
  the loop. The engine stopped there, so the policy sampled none of it; trained, they are trained never sampled.
  Needs the ids and the stop ids alone (``check_batch`` reads it too, given a tokenizer or ``stop_ids``).

Any of these makes the turn diverge at the first such id that was trained (``Divergence`` of kind ``environment``, class
``environment``): unsafe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass
from difflib import SequenceMatcher

from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Renderer
from tito_audit.replay.divergence import Divergence, window
from tito_audit.replay.next_message import NextMessage
from tito_audit.replay.schema import Episode, SampledTurn
from tito_audit.rollout.tokens import find_run, first_of

COVER = 0.8  # share of a message's rendering a turn must hold in one run


@dataclass(frozen=True)
class EnvironmentRun:
    """Ids of sampled turn ``turn``, from ``offset`` on, ``length`` of them, that the environment wrote."""

    turn: int
    offset: int
    length: int
    why: str


def message_renderings(ep: Episode, renderer: Renderer) -> list[tuple[int, list[int]]]:
    """``(index, ids)`` of every non-assistant message: what the template writes for it after the messages before it
    (a message whose append rewrites what precedes it has no rendering of its own, and is left out)."""
    msgs = ep.messages or []
    out: list[tuple[int, list[int]]] = []
    before: list[int] | None = []
    for i, m in enumerate(msgs):
        try:
            upto = renderer.render_ids(msgs[: i + 1], tools=ep.tools)
        except RenderError:
            before = None
            continue
        if m.get("role") != "assistant" and before is not None and upto[: len(before)] == before:
            out.append((i, upto[len(before) :]))
        before = upto
    return out


def _held(
    ids: Sequence[int], rendering: Sequence[int], control: frozenset[int], stops: frozenset[int]
) -> tuple[int, int] | None:
    """``(start, length)`` of ``rendering`` in ``ids`` when they hold enough of it, its header included; else None."""
    header = [i for i in rendering if i in control and i not in stops]
    if len(rendering) < 2:
        return None
    match = SequenceMatcher(None, list(ids), list(rendering), autojunk=False).find_longest_match()
    run = list(rendering[match.b : match.b + match.size])
    whole = match.size == len(rendering)
    if not whole and not (header and match.size >= COVER * len(rendering) and all(h in run for h in header)):
        return None
    start = max(0, match.a - match.b)  # where the rendering begins in the turn (a cut head included)
    return start, match.a + match.size - start


def rendered_in_turns(
    ep: Episode,
    renderings: Sequence[tuple[int, list[int]]],
    control: frozenset[int],
    stops: frozenset[int],
    text: Callable[[Sequence[int]], str],
) -> list[EnvironmentRun]:
    """Per sampled turn, the first rendering of a non-assistant message it holds."""
    out = []
    for k, turn in enumerate(ep.turns):
        for index, rendering in renderings:
            held = _held(turn.ids, rendering, control, stops)
            if held is not None:
                role = (ep.messages or [])[index].get("role", "?")
                why = (
                    f"its ids hold the template's rendering of message {index} ({role}, {text(rendering[:16])!r}): a "
                    "policy ends its turn at a stop token and does not write the next message"
                )
                out.append(EnvironmentRun(k, held[0], held[1], why))
                break
    return out


def zero_logprob_turns(ep: Episode, header: frozenset[int]) -> list[EnvironmentRun]:
    """Per sampled turn, a leading or a trailing run of log-probs exactly 0.0 (the rest real: a message glued
    before the turn's ids, or after a turn cut before its stop), or no log-probs while other turns have them, over
    ids that hold a header token of the template."""
    logged = [t.logprobs is not None for t in ep.turns]
    writes_headers = any(
        i in header and lp != 0.0 for t in ep.turns for i, lp in zip(t.ids, t.logprobs or (), strict=False)
    )
    out = []
    for k, turn in enumerate(ep.turns):
        lps = turn.logprobs
        if lps is None:
            if any(logged) and any(i in header for i in turn.ids):
                out.append(EnvironmentRun(k, 0, len(turn.ids), "it has no log-probs while the other turns have"))
            continue
        zeros = next((n for n, lp in enumerate(lps) if lp != 0.0), len(lps))
        real_elsewhere = zeros < len(lps) or any(
            t.logprobs and any(lp != 0.0 for lp in t.logprobs) for j, t in enumerate(ep.turns) if j != k
        )
        if zeros >= 2 and real_elsewhere and any(i in header for i in turn.ids[:zeros]):
            rest = "the rest real ones" if zeros < len(lps) else "the episode's other turns real ones"
            out.append(EnvironmentRun(k, 0, zeros, f"its first {zeros} ids carry log-prob 0.0, {rest}"))
            continue
        tail = next((n for n, lp in enumerate(reversed(lps)) if lp != 0.0), len(lps))
        start = len(lps) - tail
        # a template whose policy writes a header itself (harmony's ``<|start|>`` between channels) makes none
        # evidence at a turn's end, where a confident model's structural tokens may round to 0.0
        if 2 <= tail < len(lps) and not writes_headers and any(i in header for i in turn.ids[start:]):
            why = f"its last {tail} ids carry log-prob 0.0, the rest real ones"
            out.append(EnvironmentRun(k, start, tail, why))
    return out


def real_logprobs(ep: Episode) -> bool:
    """Whether any sampled id carries a log-prob other than exactly 0.0 (a log of 0.0 fill values, as
    ``to_dict(logprob_fill=0.0)`` writes, carries no evidence)."""
    return any(lp != 0.0 for t in ep.turns for lp in t.logprobs or ())


def stops_inside_turns(ep: Episode, stop_ids: frozenset[int], header: frozenset[int]) -> list[EnvironmentRun]:
    """Per sampled turn, a stop token before its last id with a header token of the template on one side of it
    (see the module docstring): the environment's ids the loop glued to the policy's."""
    out = []
    for k, turn in enumerate(ep.turns):
        ids = turn.ids
        inside = first_stop_inside(ids, stop_ids)
        if inside is None:
            continue
        if any(i in header for i in ids[:inside]):  # the turn opens with a message the environment wrote
            start, end = 0, inside + 1
        elif any(i in header for i in ids[inside + 1 :]):  # the next message glued after the policy's stop
            start, end = inside + 1, len(ids)
        else:
            continue
        why = (
            f"a stop token ({ids[inside]}) inside the sampled turn, beside a message header: an engine ends a turn "
            "at its stop, the environment's message was glued to the policy's ids"
        )
        out.append(EnvironmentRun(k, start, end - start, why))
    return out


def first_stop_inside(ids: Sequence[int], stop_ids: frozenset[int]) -> int | None:
    """Where the first stop token before the turn's last id sits, or None (an engine ends a turn at its stop)."""
    return first_of(ids[:-1], stop_ids)


def ids_after_stop(turns: Sequence[SampledTurn], stop_ids: frozenset[int]) -> list[EnvironmentRun]:
    """Per sampled turn, the ids after its first stop token, when that stop is not its last id: ids the loop glued
    after the policy's end of turn (see the module docstring)."""
    out = []
    for k, turn in enumerate(turns):
        inside = first_stop_inside(turn.ids, stop_ids)
        if inside is None:
            continue
        n = len(turn.ids) - inside - 1
        why = (
            f"{n} id(s) after the stop token ({turn.ids[inside]}) inside the sampled turn: an engine ends a turn at "
            "its stop, the loop appended them to the policy's ids"
        )
        out.append(EnvironmentRun(k, inside + 1, n, why))
    return out


def untrained_after_stop(
    turns: Sequence[SampledTurn],
    got: Sequence[int],
    mask: Sequence[int] | None,
    stop_ids: frozenset[int],
    control: frozenset[int] = frozenset(),
) -> tuple[list[SampledTurn], int]:
    """The turns with their ids after the first stop token left out where those ids are what a template writes after
    a turn's end and nothing the policy sampled, and how many ids were left out: none trained (the loss mask 0 on
    each, where the turn sits in ``got``), none with a log-prob other than 0.0 (a fill value), none a control token
    (``control``) but a stop. A loop that logs the template's newline after the stop with the turn and trains
    exactly what the engine sampled mislabels an id the engine never sampled; it drops no sample, and the comparison
    must not read it as a sampled id left untrained. A tail with a message header or real log-probs (a next turn
    merged into this one and left untrained: red team 54) stays, and is compared; trained ones stay too
    (``ids_after_stop`` names them)."""
    if mask is None or not stop_ids:
        return list(turns), 0
    foreign = control - stop_ids
    out, cut, after = [], 0, 0
    for k, turn in enumerate(turns):
        inside = first_stop_inside(turn.ids, stop_ids)
        at = turn_start(turns, got, k, after) if inside is not None else None
        if inside is None or at is None:
            out.append(turn)
            continue
        after = at
        tail = range(at + inside + 1, min(at + len(turn.ids), len(mask)))
        real = turn.logprobs is not None and any(lp != 0.0 for lp in turn.logprobs[inside + 1 :])
        glued = any(i in foreign for i in turn.ids[inside + 1 :])
        if len(tail) != len(turn.ids) - inside - 1 or any(mask[j] for j in tail) or real or glued:
            out.append(turn)
            continue
        lps = turn.logprobs[: inside + 1] if turn.logprobs is not None else None
        out.append(SampledTurn(turn.ids[: inside + 1], lps, turn.prompt_ids))
        cut += len(tail)
    return out, cut


LONG = 3  # sampled turns of an episode whose every turn cut before its stop is read as a loop's cut
CUT_SHARE = 10  # ... when at least one in CUT_SHARE of those episodes is


@dataclass(frozen=True)
class StopEndings:
    """How the sampled turns end, for the reading of a stop cut from them (``stops_cut``): ``stopped``, turns that
    hold a stop token (at their end, or before ids a loop glued after it); ``untrained``, turns that end without
    one and are followed in the trained sequence by one with the loss mask 0; ``missing``, turns but the last that
    end without one and are followed by other ids; ``long_episodes``, episodes of ``LONG`` or more sampled turns;
    ``cut_episodes``, those none of whose turns holds a stop, two or more of them cut before it (followed by it
    untrained, or by more ids). A length limit cuts every turn of such an episode rarely (at a tenth of turns cut,
    one episode of three turns in a thousand), so one loop path (a worker, an episode kind) that cuts the stop is
    named by its share of the long episodes even among episodes that keep it (red team 56: two turns, both cut by
    ``max_tokens``, are a length limit's in one episode of twenty)."""

    stopped: int = 0
    untrained: int = 0
    missing: int = 0
    long_episodes: int = 0
    cut_episodes: int = 0
    stopless: int = 0  # episodes with sampled ids, none of whose turns holds a stop

    def __add__(self, other: StopEndings) -> StopEndings:
        return StopEndings(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


def stop_endings(
    turns: Sequence[SampledTurn],
    got: Sequence[int],
    mask: Sequence[int] | None,
    stop_ids: frozenset[int],
    next_message: NextMessage | None = None,
) -> StopEndings:
    """``StopEndings`` of one episode (turns not found in ``got`` count in none). A turn but the last that ends
    without a stop counts as ``missing`` only where the ids after it, up to the next turn, hold the template's next
    message (``next_message``: the template writing on after a turn the loop cut). A loop that stops on a stop string
    and appends the environment's text after it (Search-R1's ``</search>``, then ``<information>``: no header, no
    turn word) has turns that never held a stop token (red team 56). Without ``next_message`` every such turn
    counts."""
    stopped = untrained = missing = after = 0
    sampled = sum(1 for t in turns if t.ids)
    for k, turn in enumerate(turns):
        if not turn.ids:
            continue
        if not stop_ids.isdisjoint(turn.ids):
            stopped += 1  # (ids after its stop are ``ids_after_stop``'s)
            continue
        at = turn_start(turns, got, k, after)
        if at is None:
            continue
        after, end = at, at + len(turn.ids)
        if end >= len(got):
            continue
        if got[end] in stop_ids:
            untrained += mask is None or end >= len(mask) or not mask[end]
        elif k + 1 < len(turns) and _writes_on(turns, got, k, end, next_message, stop_ids):
            missing += 1
    long = sampled >= LONG
    cut_episode = long and stopped == 0 and untrained + missing >= 2
    return StopEndings(stopped, untrained, missing, int(long), int(cut_episode), int(sampled > 0 and stopped == 0))


def _writes_on(
    turns: Sequence[SampledTurn],
    got: Sequence[int],
    k: int,
    end: int,
    next_message: NextMessage | None,
    stop_ids: frozenset[int],
) -> bool:
    """Whether the ids after turn ``k`` (from ``end``, up to where turn ``k + 1`` sits; where it is not found, up to
    the next stop id or the sequence's end) hold the template's next message (any ids, without ``next_message``)."""
    if next_message is None:
        return True
    nxt = turn_start(turns, got, k + 1, end)
    if nxt is None:
        stop = first_of(got[end:], stop_ids)
        nxt = len(got) if stop is None else end + stop
    return next_message.found_in(got[end:nxt])


def stops_cut(endings: StopEndings, episodes: int) -> bool:
    """Whether the turns look cut before the stop the engine sampled (a policy never trained to end a turn): at
    least as many turns followed by their stop untrained, or by more ids with no stop between, as turns that end
    with one; a tenth or more of the episodes of ``LONG`` or more turns holding it in none, cut before it
    (``cut_episodes``); or no turn of any of the ``episodes`` checked holding one (every one ``stopless``). A
    length limit cuts a turn now and then (``Trajectory(on_truncated="mask")`` closes it with the stop untrained),
    not half of them, and seldom every turn of a long episode; the ids cannot tell the two apart, so this is named,
    never a divergence."""
    cut = endings.untrained + endings.missing
    long_cut = endings.cut_episodes > 0 and endings.cut_episodes * CUT_SHARE >= endings.long_episodes
    stopless_all = endings.stopless > 0 and endings.stopless == episodes
    return (cut > 0 and cut >= endings.stopped) or long_cut or stopless_all


def turns_opening_with_a_message(
    ep: Episode, openings: Sequence[tuple[frozenset[int], Sequence[int]]]
) -> list[EnvironmentRun]:
    """Per sampled turn, ids that open with a control id of a message the template writes before an assistant turn
    (a user message, a tool result) and hold, after it, that message's end (``ReplayContext.openings``: ``[/INST]``,
    ``[/TOOL_RESULTS]``): a policy samples after that prompt and does not write another message first; a loop that
    glued the environment's delta to the policy's ids does. The environment's run is the turn's start through that
    end. From the ids alone: a delta that holds no stop token (Mistral's ``[INST]...[/INST]``), with real log-probs,
    is seen without messages or renders."""
    out = []
    for k, turn in enumerate(ep.turns):
        ids = turn.ids
        for headers, end in openings:
            if not ids or ids[0] not in headers:
                continue
            at = find_run(ids, end, 1)
            if at is None:
                continue
            why = (
                "it opens with a message the template writes before an assistant turn, through that message's end: a "
                "policy samples after that prompt, it does not write a message before its turn"
            )
            out.append(EnvironmentRun(k, 0, at + len(end), why))
            break
    return out


def turn_start(turns: Sequence[SampledTurn], got: Sequence[int], k: int, after: int) -> int | None:
    """Where turn ``k``'s ids sit in the trained sequence ``got`` (from ``after`` on), or None."""
    ids, prompt = turns[k].ids, turns[k].prompt_ids
    if prompt is not None and got[len(prompt) : len(prompt) + len(ids)] == ids:
        return len(prompt)
    return find_run(got, ids, after)


def environment_divergences(
    ep: Episode,
    renderer: Renderer | None,
    control: frozenset[int],
    header: frozenset[int],
    stop_ids: Sequence[int],
    decode: Callable[[Sequence[int]], str],
    openings: Sequence[tuple[frozenset[int], Sequence[int]]] = (),
) -> list[Divergence]:
    """Per sampled turn, the first environment id it holds that was trained (a ``Divergence`` of kind and class
    ``environment``, its ``tokens`` the environment ids trained). ``renderer``: the episode's, when renders are
    allowed (the render evidence needs it and the episode's messages)."""
    stops = frozenset(stop_ids)
    runs = zero_logprob_turns(ep, header)
    if renderer is not None and ep.messages is not None:
        runs += rendered_in_turns(ep, message_renderings(ep, renderer), control, stops, decode)
    runs += stops_inside_turns(ep, stops, header)  # the ids alone: named last where others agree
    runs += turns_opening_with_a_message(ep, openings)
    runs += ids_after_stop(ep.turns, stops)
    return trained_runs(ep.turns, ep.input_ids, ep.loss_mask, runs, decode)


def trained_runs(
    turns: Sequence[SampledTurn],
    got: Sequence[int],
    mask: Sequence[int] | None,
    runs: Sequence[EnvironmentRun],
    decode: Callable[[Sequence[int]], str],
) -> list[Divergence]:
    """Per sampled turn, the first of ``runs`` in it (the earliest; at a tie, the one listed first), as a divergence
    at its first id the trainer trained (``got`` and ``mask``); a run trained nowhere is none."""
    first: dict[int, EnvironmentRun] = {}
    for run in runs:
        cur = first.get(run.turn)
        if cur is None or run.offset < cur.offset:
            first[run.turn] = run
    out = []
    after = 0
    for k in sorted(first):
        run = first[k]
        start = turn_start(turns, got, k, after)
        if start is None:
            continue
        after = start
        at = start + run.offset
        trained = [j for j in range(at, min(at + run.length, len(got))) if mask is None or mask[j]]
        if not trained:
            continue
        _back, exp, act, begin = window(got, got, trained[0], trained[0])
        text = decode(got[trained[0] : trained[0] + 12])
        message = (
            f"turn {k}: environment tokens logged as sampled and trained from {text!r} on ({len(trained)} id(s)): "
            f"{run.why}"
        )
        at, n = trained[0], len(trained)
        out.append(Divergence(k, at, "environment", "environment", message, None, exp, act, begin, n))
    return out
