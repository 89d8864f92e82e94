"""Rollout logs with a known truth, for tests, benchmarks and the README: correct and broken training loops.

Episodes are the audit's own scenarios played through ``tito_audit.Trajectory`` (the template stands in for
the model, as in the audit's simulator), with a sampler that emits a non-canonical split in a turn at a known
rate. A *loop* turns one such episode into what a trainer trained on (``input_ids``, ``loss_mask``) and the
divergences it injected (``Injected``: turn, position in the trained sequence, finding class):

- ``correct``: the token buffer itself (nothing injected);
- ``naive_retokenize``: each sampled turn decoded and re-encoded (canonical ids replace a non-canonical split);
- ``stop_seam``: the stop token of each turn kept in the sequence but masked out of the loss;
- ``arguments_reserialized``: tool-call arguments parsed and dumped again compactly, then re-encoded;
- ``duplicate_previous_turn``: the next turn's chunk taken by an incremental string diff, which on templates that
  strip past reasoning repeats the previous assistant turn (modelled at the token level: a copy of it, untrained);
- ``tool_calls_cleared``: ``tool_calls`` dropped from an assistant message before the history is re-rendered: the
  trained turn is the template's rendering of the message without them;
- ``turns_encoded_alone``: each turn's text encoded on its own, so that a merge across the seam with what
  precedes it is split (and a non-canonical split comes back canonical);
- ``prefix_fallback``: the loop asserts that each render extends the last one (Qwen3-style templates fail it)
  and on failure re-renders and re-encodes the whole history, training only on turns sampled after that
  (the truth is the episode's first divergence only).

The truth of an edit is the first position where the edited sequence differs from the buffer, computed by
a plain common-prefix scan of the two, never by the replay code under test.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tito_audit.audit.simulation import Simulation, derive_turn, simulate
from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.bridge import BridgeError
from tito_audit.rollout.buffer import Trajectory
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.scenarios.spec import Scenario

if TYPE_CHECKING:
    from tito_audit.replay.analyze import EpisodeResult, ReplayContext

Message = dict[str, Any]


@dataclass(frozen=True)
class Injected:
    turn: int
    index: int  # first divergent position in the trained sequence
    cls: str


@dataclass
class Played:
    """One episode as a correct loop holds it, plus what the sampler did."""

    scenario: Scenario
    renderer: Renderer
    traj: Trajectory
    messages: list[Message]
    turns: list[list[int]]  # sampled ids per turn (possibly with a non-canonical split)
    logprobs: list[list[float]]
    canonical: list[list[int]]  # the same turns as the tokenizer encodes them
    splits: list[int | None]  # per turn: position of the split inside the turn, or None
    eligible: list[bool]  # per turn: the sampler could split a token of it
    refusals: list[int] = field(default_factory=list)  # turns after which the template refused the append


@dataclass
class Logged:
    record: dict[str, Any]
    truth: list[Injected]
    first_only: bool = False  # the truth is the episode's first divergence only


class Splitter:
    """Two in-vocabulary ids that spell a token (what a sampler can emit instead of it), memoised per id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.vocab = tokenizer.get_vocab()
        self.skip = set(tokenizer.all_special_ids or []) | set(tokenizer.get_added_vocab().values())
        self.memo: dict[int, list[int] | None] = {}

    def __call__(self, token_id: int) -> list[int] | None:
        if token_id not in self.memo:
            self.memo[token_id] = self._split(token_id)
        return self.memo[token_id]

    def _split(self, token_id: int) -> list[int] | None:
        if token_id in self.skip:
            return None
        piece = self.tok.convert_ids_to_tokens(token_id)
        if not isinstance(piece, str) or len(piece) < 2:
            return None
        for k in range(len(piece) - 1, 0, -1):
            a, b = self.vocab.get(piece[:k]), self.vocab.get(piece[k:])
            if a is not None and b is not None:
                return [int(a), int(b)]
        return None


def play(
    renderer: Renderer, scenario: Scenario, stop_ids: Sequence[int], rate: float, rng: random.Random, split: Splitter
) -> Played | None:
    """Play one scenario; each turn gets a non-canonical split with probability ``rate`` (where one exists)."""
    sim: Simulation = simulate(renderer, scenario, stop_ids)
    if not sim.ok:
        return None
    r = renderer.with_kwargs(**scenario.kwargs) if scenario.kwargs else renderer
    traj = Trajectory(r, stop_ids, list(scenario.tools) or None)
    msgs = sim.messages
    assistants = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    traj.start(msgs[: assistants[0]])
    turns: list[list[int]] = []
    lps: list[list[float]] = []
    splits: list[int | None] = []
    eligible: list[bool] = []
    refusals: list[int] = []
    for n, (idx, turn) in enumerate(zip(assistants, sim.turns, strict=True)):
        ids = list(turn.sampled_ids)
        candidates = [p for p in range(len(ids) - 1) if split(ids[p]) is not None]
        eligible.append(bool(candidates))
        split_at = None
        if candidates and rng.random() < rate:
            split_at = rng.choice(candidates)
            pieces = split(ids[split_at])
            assert pieces is not None
            ids = [*ids[:split_at], *pieces, *ids[split_at + 1 :]]
        logprobs = [round(-0.02 - 0.5 * rng.random(), 4) for _ in ids]
        traj.append_sampled(ids, logprobs=logprobs, message=msgs[idx])
        turns.append(ids)
        lps.append(logprobs)
        splits.append(split_at)
        nxt = assistants[n + 1] if n + 1 < len(assistants) else len(msgs)
        if nxt > idx + 1:
            try:
                traj.append_messages(msgs[idx + 1 : nxt])
            except BridgeError as exc:  # what code without the prefix check gets, as the audit's simulator does
                refusals.append(n)
                traj.append_refused(msgs[idx + 1 : nxt], exc)
    canonical = [list(t.sampled_ids) for t in sim.turns]
    return Played(scenario, r, traj, msgs, turns, lps, canonical, splits, eligible, refusals)


def _spans(p: Played) -> list[tuple[int, int]]:
    return p.traj.sampled_spans()


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    ids: list[int]
    mask: list[int]
    turn: int
    cls: str


def apply_edits(ids: list[int], mask: list[int], edits: list[Edit]) -> tuple[list[int], list[int], list[Injected]]:
    """Apply non-overlapping edits (original coordinates); the truth is each edit's first differing position."""
    out_ids, out_mask, truth = [], [], []
    pos = 0
    for e in sorted(edits, key=lambda e: e.start):
        out_ids += ids[pos : e.start]
        out_mask += mask[pos : e.start]
        old, old_mask = ids[e.start : e.end], mask[e.start : e.end]
        same_ids = common_prefix_len(old + ids[e.end :], e.ids + ids[e.end :])
        first = same_ids
        if old == e.ids:  # a mask-only edit: the first position whose mask changed
            first = next(k for k in range(len(old)) if old_mask[k] != e.mask[k])
        truth.append(Injected(e.turn, len(out_ids) + first, e.cls))
        out_ids += e.ids
        out_mask += e.mask
        pos = e.end
    out_ids += ids[pos:]
    out_mask += mask[pos:]
    return out_ids, out_mask, truth


def _record(p: Played, ids: list[int], mask: list[int], eid: str) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": eid,
        "messages": copy.deepcopy(p.messages),
        "turns": [{"ids": t, "logprobs": lp} for t, lp in zip(p.turns, p.logprobs, strict=True)],
        "input_ids": ids,
        "loss_mask": mask,
    }
    if p.scenario.tools:
        rec["tools"] = list(p.scenario.tools)
    if p.scenario.kwargs:
        rec["chat_template_kwargs"] = p.scenario.kwargs
    return rec


def _correct(p: Played) -> list[Edit]:
    return []


def _naive_retokenize(p: Played) -> list[Edit]:
    """Re-encoding brings back the tokenizer's own ids where the sampler emitted a split."""
    edits = []
    for k, ((a, b), split) in enumerate(zip(_spans(p), p.splits, strict=True)):
        if split is not None:
            edits.append(Edit(a, b, p.canonical[k], [1] * len(p.canonical[k]), k, "non_canonical"))
    return edits


def _stop_seam(p: Played) -> list[Edit]:
    stops = set(p.traj.stop_ids)
    edits = []
    for k, (a, b) in enumerate(_spans(p)):
        if b > a and p.traj.input_ids[b - 1] in stops:
            edits.append(Edit(b - 1, b, [p.traj.input_ids[b - 1]], [0], k, "stop_seam"))
    return edits


def _encode_tail(r: Renderer, text: str) -> list[int] | None:
    """``text`` encoded as it would be after a newline (no SentencePiece start-of-text space), or None."""
    anchor = r.encode("\n")
    full = r.encode("\n" + text)
    if full[: len(anchor)] != anchor:
        return None
    # checked in place after the anchor: decoded alone, a SentencePiece leading space would not read back
    same = r.decode(full, skip_special_tokens=False) == r.decode(anchor, skip_special_tokens=False) + text
    return full[len(anchor) :] if same else None


def _arguments_reserialized(p: Played) -> list[Edit]:
    r = p.renderer
    edits = []
    assistants = [m for m in p.messages if m["role"] == "assistant"]
    for k, ((a, b), msg) in enumerate(zip(_spans(p), assistants, strict=True)):
        if p.splits[k] is not None:
            continue
        ids = p.traj.input_ids[a:b]
        text = r.decode(ids, skip_special_tokens=False)
        for call in msg.get("tool_calls") or []:
            args = call.get("function", {}).get("arguments")
            if not isinstance(args, dict) or not args:
                continue
            old = json.dumps(args, ensure_ascii=False)
            new = json.dumps(args, ensure_ascii=False, separators=(",", ":"))
            at = text.find(old)
            if at < 0 or old == new:
                continue
            # the token holding the start of the arguments, and everything after it re-encoded
            cut = next(i for i in range(len(ids) + 1) if len(r.decode(ids[:i], skip_special_tokens=False)) > at) - 1
            head = r.decode(ids[:cut], skip_special_tokens=False)
            tail = _encode_tail(r, text[len(head) :].replace(old, new, 1))
            if tail is None:
                continue
            new_ids = ids[:cut] + tail
            edits.append(Edit(a, b, new_ids, [1] * len(new_ids), k, "serialization"))
            break
    return edits


def _duplicate_previous_turn(p: Played) -> list[Edit]:
    edits = []
    spans = _spans(p)
    for k in range(1, len(spans)):
        a, b = spans[k - 1]
        prev = p.traj.input_ids[a:b]
        edits.append(Edit(b, b, prev, [0] * len(prev), k, "history_rewrite"))
    return edits


def _tool_calls_cleared(p: Played) -> list[Edit]:
    r, tools = p.renderer, list(p.scenario.tools) or None
    assistants = [i for i, m in enumerate(p.messages) if m["role"] == "assistant"]
    edits = []
    for k, (a, b) in enumerate(_spans(p)):
        idx = assistants[k]
        msg = p.messages[idx]
        if k == len(assistants) - 1 or not msg.get("tool_calls") or p.splits[k] is not None:
            continue
        cleared = [*p.messages[:idx], {k2: v for k2, v in msg.items() if k2 != "tool_calls"}, *p.messages[idx + 1 :]]
        try:
            ids = derive_turn(r, cleared, idx, tools, p.traj.stop_ids).sampled_ids
        except RenderError:
            continue
        if ids != p.traj.input_ids[a:b]:
            edits.append(Edit(a, b, ids, [1] * len(ids), k, "history_rewrite"))
    return edits


def _turns_encoded_alone(p: Played) -> list[Edit]:
    """Each turn's text encoded on its own: a merge across the seam with what precedes it (SentencePiece's
    start-of-text space, a byte-level merge of the prompt's last characters) is split; splits become canonical."""
    r = p.renderer
    stops = set(p.traj.stop_ids)
    edits = []
    for k, (a, b) in enumerate(_spans(p)):
        ids = p.traj.input_ids[a:b]
        body, stop = (ids[:-1], ids[-1:]) if ids and ids[-1] in stops else (ids, [])
        alone = r.encode(r.decode(body, skip_special_tokens=False)) + stop
        if alone != ids:
            # the texts as they read after the id before the turn (decoding alone drops a SentencePiece space)
            lead = p.traj.input_ids[a - 1 : a]
            now, was = (r.decode(lead + t, skip_special_tokens=False) for t in (alone, ids))
            if now == was:
                cls = "non_canonical"
            elif "".join(now.split()) == "".join(was.split()):
                cls = "whitespace"  # e.g. the start-of-text space a SentencePiece tokenizer adds
            else:
                raise AssertionError(f"{p.scenario.id}: turn {k} encoded alone reads {now!r}, not {was!r}")
            edits.append(Edit(a, b, alone, [1] * len(alone), k, cls))
    return edits


LOOPS: dict[str, Callable[[Played], list[Edit]]] = {
    "correct": _correct,
    "naive_retokenize": _naive_retokenize,
    "stop_seam": _stop_seam,
    "arguments_reserialized": _arguments_reserialized,
    "duplicate_previous_turn": _duplicate_previous_turn,
    "tool_calls_cleared": _tool_calls_cleared,
    "turns_encoded_alone": _turns_encoded_alone,
}


def log_episode(p: Played, loop: str, eid: str) -> Logged:
    """What ``loop`` trains on for this episode, as a native record, with the injected truth."""
    if loop == "prefix_fallback":
        return _prefix_fallback(p, eid)
    ids, mask = list(p.traj.input_ids), list(p.traj.loss_mask)
    new_ids, new_mask, truth = apply_edits(ids, mask, LOOPS[loop](p))
    return Logged(_record(p, new_ids, new_mask, eid), truth)


Place = tuple[int, int | None, str]  # (turn, first divergent position, class)


def replay_logged(logged: Logged, line: int, ctx: ReplayContext) -> tuple[list[Place], list[Place], EpisodeResult]:
    """Replay one generated episode: what it found and what was injected, as (turn, position, class), and the
    whole result. For a ``first_only`` truth only the first divergence found is kept: after a re-render only the
    first one has a single right answer."""
    from tito_audit.replay.analyze import analyze
    from tito_audit.replay.schema import episode_from_native

    res = analyze(episode_from_native(logged.record, line), ctx)
    found: list[Place] = [(d.turn, d.index, d.cls) for d in res.divergences]
    injected: list[Place] = [(t.turn, t.index, t.cls) for t in logged.truth]
    return (found[:1] if logged.first_only else found), injected, res


def _prefix_fallback(p: Played, eid: str) -> Logged:
    """On the first refused append, re-render + re-encode the history and train only later turns.

    The truth holds the episode's first divergence only (``Logged.first_only``): after a re-render the rest of
    the sequence has no single right alignment to the buffer.
    """
    assistants = [i for i, m in enumerate(p.messages) if m["role"] == "assistant"]
    if not p.refusals or p.refusals[0] + 1 >= len(assistants):
        return Logged(_record(p, list(p.traj.input_ids), list(p.traj.loss_mask), eid), [])
    k = p.refusals[0]
    context = p.renderer.render_ids(
        p.messages[: assistants[k + 1]], tools=list(p.scenario.tools) or None, add_generation_prompt=True
    )
    spans = _spans(p)
    rest = spans[k + 1][0]  # from turn k+1's sampled ids on, the buffer goes on as it was
    ids = context + list(p.traj.input_ids[rest:])
    mask = [0] * len(context) + list(p.traj.loss_mask[rest:])
    first_id = common_prefix_len(p.traj.input_ids, ids)
    a0 = spans[0][0]  # turn 0's sampled ids are no longer trained: a mask flip there, unless ids differ before
    if a0 < first_id:
        truth = Injected(0, a0, "stop_seam" if p.traj.input_ids[a0] in p.traj.stop_ids else "template")
    else:
        turn = next(j for j, (_, b) in enumerate(spans) if first_id < b)
        split = p.splits[turn]
        # re-encoding first departs where the sampler split a token (the canonical id is back), or in the render
        resplit = split is not None and first_id == spans[turn][0] + split
        truth = Injected(turn, first_id, "non_canonical" if resplit else "history_rewrite")
    return Logged(_record(p, ids, mask, eid), [truth], first_only=True)


def with_engine_prompts(record: dict[str, Any], p: Played, date: dt.datetime | None = None) -> dict[str, Any]:
    """The record as a loop that also logs what the engine was given: each turn's ``prompt_ids`` (the correct
    buffer up to the turn, what a TITO loop sends) and, with ``date``, the date its template saw."""
    out = copy.deepcopy(record)
    for turn, (a, _b) in zip(out["turns"], _spans(p), strict=True):
        turn["prompt_ids"] = list(p.traj.input_ids[:a])
    if date is not None:
        out["date"] = date.isoformat()
    return out


def played_episodes(
    model: Any,
    rate: float,
    seed: int = 0,
    scenarios: Sequence[Scenario] | None = None,
    date: dt.datetime | None = None,
) -> list[Played]:
    """Every catalog scenario of the audit that the template plays, each played once (rendered at ``date``, by
    default the audit's pinned date; the scenarios derived from the template are played in its own shapes, which
    ``play`` does not apply)."""
    from tito_audit.audit.context import AuditContext, AuditOptions

    ctx = AuditContext(model, AuditOptions() if date is None else AuditOptions(date=date))
    rng = random.Random(seed)
    split = Splitter(model.tokenizer)
    # as tito_audit.Trajectory renders (the loop these logs stand for): control-token text in the conversation
    # marked, so a tool result that holds '<|im_end|>' stays text (the audit's verdict path renders plainly)
    renderer = ctx.renderer.with_marking(True)
    out = []
    for sc in scenarios if scenarios is not None else [s for s in ctx.scenarios if "derived" not in s.tags]:
        p = play(renderer, sc, ctx.stop_ids, rate, rng, split)
        if p is not None:
            out.append(p)
    return out
