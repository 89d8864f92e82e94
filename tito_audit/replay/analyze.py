"""Replay one episode: what the trainer trained on against what a correct loop would hold, and the "what if".

The reference, in order of trust:
- ``engine``: every turn carries the engine's ``prompt_ids``. The loop's own contexts are the reference
  (``tito_audit.replay.engine``): no render, and a correct loop on a template that prints the date, or that builds
  its deltas after a fixed base conversation, is exact. Where those contexts differ from the template's own
  rendering (messages rendered with the record's template kwargs and date) that is context drift
  (``tito_audit.replay.drift``), a warning.
- ``buffer``: messages but no engine prompts. The reference is rebuilt the way a correct loop builds it: the
  prompt rendered once, each turn's sampled ids kept as they are, environment messages appended as the template's
  token deltas (``tito_audit.Trajectory``). Where the template rewrites history for an append (no exact delta),
  the reference holds what appending anyway gives, and the episode notes it. When the buffer cannot be rebuilt
  (a render fails), the episode is not checked against a reference (``EpisodeResult.error``): it is counted and
  named as incomplete, never passed.
- ``sampled``: neither: only the sampled turns are the reference (``compare.against_sampled``); what the engine
  saw between them is not checked, and the verdict says so.

When only some turns carry ``prompt_ids``, each of them is also checked against the trained sequence
(``engine.prompt_departures``). An episode that proves nothing (no sampled id, or SkyRL turns taken from the
trained mask) is not checked, and named as such.

The "what if" re-renders the parsed conversation and re-encodes it, as naive rollout code does, and compares
that with the template's buffer: what re-tokenization would have done to these real samples. Each turn's sampled
ids are also decoded and re-encoded: a turn whose ids come back different was sampled as a non-canonical split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from tito_audit.errors import RenderError
from tito_audit.policy.view import mask_runs
from tito_audit.rendering.renderer import Renderer
from tito_audit.replay.compare import Comparison, against_reference, against_sampled
from tito_audit.replay.context import MARK_WINDOW, ReplayContext, other_tokenizer
from tito_audit.replay.divergence import Divergence
from tito_audit.replay.drift import date_positions, drift
from tito_audit.replay.engine import engine_buffer, exact, has_engine_prompts, prompt_departures
from tito_audit.replay.environment import (
    StopEndings,
    environment_divergences,
    real_logprobs,
    stop_endings,
    untrained_after_stop,
)
from tito_audit.replay.id_diff import align
from tito_audit.replay.schema import Episode
from tito_audit.report.finding_class import ReasoningMarks
from tito_audit.rollout.bridge import AppendRefused, BridgeError
from tito_audit.rollout.buffer import Trajectory
from tito_audit.scenarios.reasoning import reasoning_marks


@dataclass
class EpisodeResult:
    """What replay found in one episode (plain data: it crosses process boundaries)."""

    line: int
    id: str
    source: str
    turns: int = 0
    sampled_tokens: int = 0
    trained_tokens: int = 0
    reference: str = "sampled"  # "engine" (the engine's prompts), "buffer" (rebuilt from messages) or "sampled"
    shape: list[str] = field(default_factory=list)
    trained_not_sampled: int = 0
    sampled_not_trained: int = 0
    mask_flips: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    logprob_mass: float = 0.0
    logprob_tokens: int = 0
    whatif: list[Divergence] | None = None  # None: not computed (no messages, --no-what-if, or no re-render)
    whatif_tokens: int = 0  # sampled ids naive re-tokenization would not train as sampled
    whatif_failed: bool = False  # the what-if was asked for but the template does not re-render the conversation
    drift: list[Divergence] | None = None  # None: not measured (no engine prompts or no messages, or --no-drift)
    drift_tokens: int = 0
    noncanonical_turns: int = 0
    noncanonical_tokens: int = 0
    noncanonical_checked: bool = False
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why the episode is not checked (incomplete): no reference, or nothing sampled
    unmasked: bool = False  # no loss_mask: the sampled turns were looked for, which ids were trained was not checked
    # neither renders (no messages, or none allowed) nor real log-probs (none, or all 0.0 fill values): environment
    # tokens logged as sampled were looked for only at a stop inside a turn (``replay.environment``): a loop that
    # glued a delta without one is not seen
    environment_stops_only: bool = False
    no_trainer: bool = False  # no trained sequence logged: only the engine's side (its prompts, its output) was checked
    marks: bool = True  # the ids open with a control token of this template (a log of this tokenizer does)
    stop_turns: int = 0  # sampled turns that end with one of this model's stop tokens
    # how the sampled turns end: with a stop, or cut before one (``environment.stop_endings``)
    stop_endings: StopEndings = field(default_factory=StopEndings)
    file: str = ""  # the log file, when a replay reads several

    @property
    def diverged(self) -> bool:
        return bool(self.divergences or self.shape)


def _shape(ep: Episode) -> list[str]:
    out = list(ep.shape_notes)
    if ep.loss_mask is not None and len(ep.loss_mask) != len(ep.input_ids):
        out.append(f"loss_mask has {len(ep.loss_mask)} values for {len(ep.input_ids)} input_ids")
    for k, t in enumerate(ep.turns):
        if t.logprobs is not None and len(t.logprobs) != len(t.ids):
            out.append(f"turn {k}: {len(t.logprobs)} logprobs for {len(t.ids)} sampled ids")
    return out


def rebuild_buffer(ep: Episode, ctx: ReplayContext, renderer: Renderer | None = None) -> tuple[Trajectory, list[str]]:
    """The token buffer a correct loop holds for this episode; notes where the template refused an append."""
    assert ep.messages is not None
    renderer = renderer or ctx.renderer_for(ep)
    traj = Trajectory(renderer, ctx.stop_ids, ep.tools, on_truncated="mask", after_stop="drop")
    msgs = ep.messages
    assistants = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    notes: list[str] = []
    traj.start(msgs[: assistants[0]])
    for n, idx in enumerate(assistants):
        turn = ep.turns[n]
        lps = turn.logprobs if turn.logprobs is not None and len(turn.logprobs) == len(turn.ids) else None
        traj.append_sampled(turn.ids, logprobs=lps, message=msgs[idx])
        nxt = assistants[n + 1] if n + 1 < len(assistants) else len(msgs)
        if nxt > idx + 1:
            try:
                traj.append_messages(msgs[idx + 1 : nxt])
            except BridgeError as exc:
                notes.append(f"turn {n}: the template rewrites history for this append ({exc.reason})")
                traj.append_refused(msgs[idx + 1 : nxt], exc)
    return traj, notes


def naive_ids(ep: Episode, ctx: ReplayContext, traj: Trajectory) -> list[int]:
    """Decode -> parse -> re-render -> re-encode: what naive rollout code would train on (ids)."""
    assert ep.messages is not None
    r = traj.renderer
    text = r.render(ep.messages, tools=ep.tools)
    ids = r.encode(text)
    # Text the template writes after the final stop token is no sampler's output: cut it, as the simulator does.
    last = len(ids)
    while last > 0 and ids[last - 1] not in ctx.stop_ids:
        last -= 1
    return ids[:last] if last else ids


def noncanonical(ep: Episode, ctx: ReplayContext, before: Sequence[int | None]) -> tuple[int, int]:
    """(turns, tokens) of sampled ids that decode -> encode does not give back: non-canonical splits.

    Each turn is re-encoded after the token that preceded it (``before[k]``), because tokenizers that prepend
    a space at the start of a text (SentencePiece's "first" scheme) encode a turn alone differently from the
    same turn in context; the turn is canonical when the re-encoding ends with exactly its ids.
    """
    turns = tokens = 0
    stops = set(ctx.stop_ids)
    for k, t in enumerate(ep.turns):
        body = t.ids[:-1] if t.ids and t.ids[-1] in stops else t.ids
        if not body:
            continue
        prev = before[k] if k < len(before) else None
        lead = [prev] if prev is not None else []
        again = ctx.renderer.encode(ctx.decode([*lead, *body]))
        if again[len(again) - len(body) :] != body or len(again) < len(body):
            turns += 1
            tail = again[len(again) - len(body) :] if lead and again[:1] == lead else again
            tokens += max(1, max(len(body), len(tail)) - _common_prefix_suffix(body, tail))
    return turns, tokens


def _common_prefix_suffix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    p = next((i for i in range(n) if a[i] != b[i]), n)
    s = 0
    while s < n - p and a[len(a) - 1 - s] == b[len(b) - 1 - s]:
        s += 1
    return p + s


def _merge(res: EpisodeResult, cmp: Comparison) -> None:
    res.trained_not_sampled = cmp.trained_not_sampled
    res.sampled_not_trained = cmp.sampled_not_trained
    res.mask_flips = cmp.mask_flips
    res.divergences = cmp.divergences
    res.logprob_mass = cmp.logprob_mass
    res.logprob_tokens = cmp.logprob_tokens


def _located(ep: Episode) -> list[tuple[int, int]]:
    """Where each turn sits in the trained sequence when the mask says so (for the token before it)."""
    runs = mask_runs(ep.loss_mask) if ep.loss_mask is not None else []
    if len(runs) == len(ep.turns):
        return runs
    return [(0, 0)] * len(ep.turns)


def _against_engine(ep: Episode, ctx: ReplayContext) -> tuple[Comparison, list[int]]:
    """The TITO check against the engine's prompts; also the loop's buffer (for context drift)."""
    if exact(ep, mask_runs):
        last = ep.turns[-1]
        assert last.prompt_ids is not None
        return Comparison(), ep.input_ids[: len(last.prompt_ids) + len(last.ids)]
    kw = ctx.compare_kwargs()
    buf = engine_buffer(ep, **kw)
    loop = list(buf.ids)
    got = ep.input_ids
    # An untrained tail after the last sampled ids (a final environment message) changes no gradient: it joins
    # the reference as it is, and a loss mask on it is still a flip.
    if got[: len(buf.ids)] == buf.ids:
        tail = got[len(buf.ids) :]
    else:
        ops = align(buf.ids, got)
        tail = list(got[ops[-1][3] : ops[-1][4]]) if ops and ops[-1][0] == "insert" else []
    buf.push(tail, False)
    marks = reasoning_marks(ctx.renderer.chat_template, ep.messages)  # tells reasoning from content
    cmp = against_reference(buf.ids, buf.mask, buf.logprobs, buf.spans, got, ep.loss_mask, **kw, reasoning=marks)
    _earliest(cmp, buf.context)  # the engine was not given its samples back: per turn, the earlier place wins
    return cmp, loop


def _earliest(cmp: Comparison, found: Sequence[Divergence]) -> None:
    """Add ``found`` to the comparison's divergences, keeping per turn the one placed first."""
    first = {d.turn: d for d in cmp.divergences}
    for d in found:
        cur = first.get(d.turn)
        if cur is None or (d.index is not None and cur.index is not None and d.index < cur.index):
            first[d.turn] = d
    cmp.divergences = [first[k] for k in sorted(first)]


def _environment(ep: Episode, ctx: ReplayContext, cmp: Comparison, renders: bool) -> None:
    """Environment ids logged as sampled and trained (``tito_audit.replay.environment``): a divergence of the turn,
    the earlier place per turn wins and the turn holds both classes; their ids count as trained never sampled where
    the comparison had not counted them (no divergence of its own in that turn)."""
    renderer = ctx.renderer_for(ep) if renders else None
    found = environment_divergences(
        ep, renderer, ctx.control_ids, ctx.header_ids, ctx.stop_ids, ctx.decode, ctx.openings
    )
    by_turn = {d.turn: d for d in cmp.divergences}
    for env in found:
        cur = by_turn.get(env.turn)
        if cur is None:
            cmp.trained_not_sampled += env.tokens
            by_turn[env.turn] = env
        elif cur.index is not None and env.index is not None and env.index < cur.index:
            env.classes += [c for c in cur.classes if c not in env.classes]
            by_turn[env.turn] = env
        elif "environment" not in cur.classes:
            cur.classes.append("environment")
    cmp.divergences = [by_turn[k] for k in sorted(by_turn)]


def _unchecked(ep: Episode, res: EpisodeResult) -> str | None:
    """Why an episode whose comparison ran still proves nothing about the loop, or None."""
    if ep.turns_from_mask:
        return (
            "not checked: the log keeps no sampled ids (SkyRL), its turns are the runs of the trained loss_mask, so "
            "the trained ids could only be compared with themselves; log the engine's ids per turn (--map turns=...)"
        )
    if not any(t.ids for t in ep.turns) and not res.divergences:
        return "not checked: the record holds no sampled id (turns empty): nothing to compare the trained ids with"
    return None


def _drift(ep: Episode, ctx: ReplayContext, traj: Trajectory, loop: list[int], res: EpisodeResult) -> None:
    """Context drift up to the last sampled id: the loop's buffer ends there (what the engine saw), the template's
    goes on with any messages after the last turn."""
    kw = ctx.compare_kwargs()
    spans = traj.sampled_spans()
    template = traj.input_ids[: spans[-1][1]] if spans else traj.input_ids
    found = drift(template, spans, loop, **kw)
    if found.divergences and ctx.dated and ep.messages is not None:
        first_assistant = next(i for i, m in enumerate(ep.messages) if m.get("role") == "assistant")
        dates = date_positions(traj.renderer, ep.messages[:first_assistant], ep.tools)
        if dates is not None:
            found = drift(template, spans, loop, **kw, dates=dates)
    res.drift, res.drift_tokens = found.divergences, found.tokens


def _counted(ep: Episode, ctx: ReplayContext) -> EpisodeResult:
    """The episode's counts and shape notes, before any comparison."""
    res = EpisodeResult(ep.line, ep.id, ep.source, len(ep.turns), sum(len(t.ids) for t in ep.turns), file=ep.file)
    res.trained_tokens = sum(ep.loss_mask) if ep.loss_mask is not None else 0
    res.shape = _shape(ep)
    stops = set(ctx.stop_ids)
    res.stop_turns = sum(1 for t in ep.turns if t.ids and t.ids[-1] in stops)
    res.stop_endings = stop_endings(ep.turns, ep.input_ids, ep.loss_mask, frozenset(stops), ctx.next_message)
    res.marks = not ctx.marks or not ctx.marks.isdisjoint(ep.input_ids[:MARK_WINDOW])
    return res


def _rebuilt(ep: Episode, ctx: ReplayContext, res: EpisodeResult, engine: bool) -> tuple[Trajectory | None, str | None]:
    """The template's buffer, when the episode has messages and something needs it (the reference without engine
    prompts, the what-if, the drift); else None, with why the template could not build it."""
    if ep.messages is None or not ep.turns or (engine and not ctx.whatif and not ctx.drift):
        return None, None
    try:
        traj, res.notes = rebuild_buffer(ep, ctx)
    except (RenderError, AppendRefused, ValueError) as exc:
        return None, f"the template does not render this episode ({type(exc).__name__}: {exc})"
    return traj, None


def _compared(
    ep: Episode,
    ctx: ReplayContext,
    res: EpisodeResult,
    traj: Trajectory | None,
    template_error: str | None,
    marks: ReasoningMarks,
) -> tuple[Comparison, list[int] | None]:
    """The TITO check against the best reference the log allows (the engine's prompts, the rebuilt buffer, or the
    sampled turns alone); also the loop's own buffer when the engine's prompts built it (for the drift)."""
    kw = ctx.compare_kwargs()
    if has_engine_prompts(ep):
        res.reference = "engine"
        return _against_engine(ep, ctx)
    if traj is not None:
        res.reference = "buffer"
        spans = traj.sampled_spans()
        cmp = against_reference(
            traj.input_ids, traj.loss_mask, traj.logprobs, spans, ep.input_ids, ep.loss_mask, **kw, reasoning=marks
        )
    else:
        if template_error is not None:  # no reference to check the context against: not checked, and said so
            res.error = f"reference buffer not rebuilt: {template_error}"
        turns, lps = [t.ids for t in ep.turns], [t.logprobs for t in ep.turns]
        cmp = against_sampled(turns, lps, ep.input_ids, ep.loss_mask, **kw, reasoning=marks)
    if any(t.prompt_ids is not None for t in ep.turns):
        # some turns carry the engine's prompt: each is checked against the trained sequence (the context the turn
        # is trained in), the earlier place per turn wins
        _earliest(cmp, prompt_departures(ep, **kw))
    return cmp, None


def _noncanonical_turns(ep: Episode, ctx: ReplayContext, res: EpisodeResult, traj: Trajectory | None) -> None:
    """Each sampled turn re-encoded after the id that preceded it where the engine or the buffer says what it was."""
    if has_engine_prompts(ep):
        before: list[int | None] = [t.prompt_ids[-1] if t.prompt_ids else None for t in ep.turns]
    else:
        spans, ref = (traj.sampled_spans(), traj.input_ids) if traj is not None else (_located(ep), ep.input_ids)
        before = [ref[a - 1] if a > 0 else None for a, _ in spans]
    res.noncanonical_turns, res.noncanonical_tokens = noncanonical(ep, ctx, before)
    res.noncanonical_checked = True


def _what_if(
    ep: Episode, ctx: ReplayContext, res: EpisodeResult, traj: Trajectory | None, marks: ReasoningMarks
) -> None:
    """Naive re-tokenization of the parsed conversation against the template's buffer."""
    if traj is None:
        res.whatif_failed = True
        return
    try:
        naive = naive_ids(ep, ctx, traj)
    except RenderError as exc:
        res.whatif_failed = True
        res.notes.append(f"what-if: the template does not re-render this conversation ({exc.kind}: {exc.message})")
        return
    spans = traj.sampled_spans()
    kw = ctx.compare_kwargs()
    what = against_reference(traj.input_ids, traj.loss_mask, traj.logprobs, spans, naive, None, **kw, reasoning=marks)
    res.whatif = what.divergences
    res.whatif_tokens = what.sampled_not_trained


def analyze(ep: Episode, ctx: ReplayContext) -> EpisodeResult:
    """Replay one episode; never raises for what is in the log (problems become the result)."""
    turns, cut = untrained_after_stop(ep.turns, ep.input_ids, ep.loss_mask, frozenset(ctx.stop_ids), ctx.control_ids)
    if cut:  # ids after a turn's stop, logged with it and trained nowhere: never sampled, never counted as such
        ep = replace(ep, turns=turns)
    res = _counted(ep, ctx)
    if not res.marks and not res.stop_turns and any(t.ids for t in ep.turns):  # another tokenizer's episode
        res.error = other_tokenizer(ctx)
        return res
    marks = reasoning_marks(ctx.renderer.chat_template, ep.messages)  # tells reasoning from content
    engine = has_engine_prompts(ep)
    traj, template_error = _rebuilt(ep, ctx, res, engine)
    if cut:
        res.notes.append(f"{cut} id(s) after a turn's stop token logged with the turn, untrained: not read as sampled")
    cmp, loop = _compared(ep, ctx, res, traj, template_error, marks)
    renders = ep.messages is not None and (ctx.whatif or ctx.drift or not engine)
    _environment(ep, ctx, cmp, renders)
    _merge(res, cmp)
    res.unmasked = ep.loss_mask is None
    res.environment_stops_only = not renders and not real_logprobs(ep)
    res.no_trainer = not ep.trainer_logged
    if res.error is None:
        res.error = _unchecked(ep, res)
    if template_error is not None and res.error is None:
        res.notes.append(f"context drift and what-if not measured: {template_error}")
    if engine and traj is not None and ctx.drift and loop is not None:
        _drift(ep, ctx, traj, loop, res)
    if ctx.noncanonical:
        _noncanonical_turns(ep, ctx, res, traj)
    if ctx.whatif and ep.messages is not None and ep.turns:
        _what_if(ep, ctx, res, traj, marks)
    return res
