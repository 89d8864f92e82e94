"""Replay one episode: what the trainer trained on against what a correct loop would hold, and the "what if".

With messages, the reference is rebuilt the way a correct loop builds it: the prompt rendered once, each
turn's sampled ids kept as they are, environment messages appended as the template's token deltas
(``tito_audit.Trajectory``). Where the template rewrites history for an append (no exact delta), the reference
holds what appending anyway gives, and the episode notes it. Without messages only the sampled turns are the
reference (``compare.against_sampled``).

The "what if" re-renders the parsed conversation and re-encodes it, as naive rollout code does, and compares
that with the reference: what re-tokenization would have done to these real samples. Each turn's sampled ids
are also decoded and re-encoded: a turn whose ids come back different was sampled as a non-canonical split.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Renderer
from tito_audit.replay.compare import Comparison, against_reference, against_sampled, mask_runs
from tito_audit.replay.divergence import Divergence
from tito_audit.replay.schema import Episode
from tito_audit.rollout.bridge import AppendRefused, BridgeError
from tito_audit.rollout.buffer import LIBRARY_LIMITS, Trajectory
from tito_audit.rollout.stop import stop_token_ids
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
    reference: str = "sampled"  # "buffer" (rebuilt from messages) or "sampled" (turns only)
    shape: list[str] = field(default_factory=list)
    trained_not_sampled: int = 0
    sampled_not_trained: int = 0
    mask_flips: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    logprob_mass: float = 0.0
    logprob_tokens: int = 0
    whatif: list[Divergence] | None = None  # None: not computed (no messages, or --no-what-if)
    whatif_tokens: int = 0  # sampled ids naive re-tokenization would not train as sampled
    noncanonical_turns: int = 0
    noncanonical_tokens: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the reference could not be rebuilt (the token-level checks still ran)

    @property
    def diverged(self) -> bool:
        return bool(self.divergences or self.shape)


@dataclass
class ReplayContext:
    """Everything the analysis needs from the model, built once per process."""

    renderer: Renderer
    stop_ids: list[int]
    special_ids: list[int]
    bos_id: int | None
    whatif: bool = True

    @classmethod
    def from_model(cls, model: Any, whatif: bool = True) -> ReplayContext:
        renderer = Renderer(model.tokenizer, model.chat_template, limits=LIBRARY_LIMITS)
        stops = list(stop_token_ids(model.tokenizer, renderer, getattr(model, "generation_eos_ids", None) or ()))
        tok = model.tokenizer
        return cls(renderer, stops, sorted(set(tok.all_special_ids or [])), tok.bos_token_id, whatif)

    def decode(self, ids: Sequence[int]) -> str:
        return self.renderer.decode(list(ids), skip_special_tokens=False)


def _shape(ep: Episode) -> list[str]:
    out = list(ep.shape_notes)
    if ep.loss_mask is not None and len(ep.loss_mask) != len(ep.input_ids):
        out.append(f"loss_mask has {len(ep.loss_mask)} values for {len(ep.input_ids)} input_ids")
    for k, t in enumerate(ep.turns):
        if t.logprobs is not None and len(t.logprobs) != len(t.ids):
            out.append(f"turn {k}: {len(t.logprobs)} logprobs for {len(t.ids)} sampled ids")
    return out


def rebuild_buffer(ep: Episode, ctx: ReplayContext) -> tuple[Trajectory, list[str]]:
    """The token buffer a correct loop holds for this episode; notes where the template refused an append."""
    assert ep.messages is not None
    renderer = ctx.renderer.with_kwargs(**ep.template_kwargs) if ep.template_kwargs else ctx.renderer
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


def analyze(ep: Episode, ctx: ReplayContext) -> EpisodeResult:
    """Replay one episode; never raises for what is in the log (problems become the result)."""
    res = EpisodeResult(ep.line, ep.id, ep.source, len(ep.turns), sum(len(t.ids) for t in ep.turns))
    res.trained_tokens = sum(ep.loss_mask) if ep.loss_mask is not None else 0
    res.shape = _shape(ep)
    kw: dict[str, Any] = dict(decode=ctx.decode, stop_ids=ctx.stop_ids, special_ids=ctx.special_ids, bos_id=ctx.bos_id)
    kw["reasoning"] = reasoning_marks(ctx.renderer.chat_template, ep.messages)  # tells reasoning from content
    traj: Trajectory | None = None
    if ep.messages is not None:
        try:
            traj, res.notes = rebuild_buffer(ep, ctx)
        except (RenderError, AppendRefused, ValueError) as exc:
            res.error = f"reference buffer not rebuilt ({type(exc).__name__}: {exc}); turns-only checks"
    if traj is not None:
        res.reference = "buffer"
        cmp = against_reference(
            traj.input_ids, traj.loss_mask, traj.logprobs, traj.sampled_spans(), ep.input_ids, ep.loss_mask, **kw
        )
    else:
        cmp = against_sampled(
            [t.ids for t in ep.turns], [t.logprobs for t in ep.turns], ep.input_ids, ep.loss_mask, **kw
        )
    _merge(res, cmp)
    if traj is not None:
        spans, ref = traj.sampled_spans(), traj.input_ids
    else:
        spans, ref = _located(ep), ep.input_ids
    before = [ref[a - 1] if a > 0 else None for a, _ in spans]
    res.noncanonical_turns, res.noncanonical_tokens = noncanonical(ep, ctx, before)
    if traj is not None and ctx.whatif:
        try:
            naive = naive_ids(ep, ctx, traj)
        except RenderError as exc:
            res.notes.append(f"what-if: the template does not re-render this conversation ({exc.kind}: {exc.message})")
        else:
            what = against_reference(
                traj.input_ids, traj.loss_mask, traj.logprobs, traj.sampled_spans(), naive, None, **kw
            )
            res.whatif = what.divergences
            res.whatif_tokens = what.sampled_not_trained
    return res
