"""Episodes and their two training views.

- view B (buffer): the ids a sampler emitted, kept as-is, with environment messages appended as token deltas;
  loss mask 1 exactly on sampled ids (stop token included);
- view R (re-tokenized): the parsed conversation re-rendered with the chat template and re-encoded, with the
  loss mask rebuilt from the rendering the way naive rollout code does it (each assistant turn spans from the
  end of the encoded generation-prompt render up to and including the next stop token).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tito_audit.audit.episode_cuts import cuts as cuts_of
from tito_audit.audit.episode_cuts import endings
from tito_audit.audit.simulation import Simulation, simulate
from tito_audit.errors import RenderError
from tito_audit.policy.view import View
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl.toolformat import ToolCallFormat
from tito_audit.scenarios.spec import Scenario

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

Message = dict[str, Any]


@dataclass
class Episode:
    """One multi-turn episode: the buffer view, the naive view, the messages and the reward."""

    scenario_id: str
    buffer: View
    naive: View
    messages: list[Message]
    rollout_logprobs: list[float | None] = field(default_factory=list)
    reward: float = 0.0
    group: int = 0
    noncanonical_tokens: int = 0  # sampled tokens emitted as a non-canonical split
    sampled_tokens: int = 0
    naive_error: str | None = None  # naive code could not even rebuild the conversation
    parses: list[dict[str, Any]] = field(default_factory=list)  # per assistant turn: calls expected / parsed
    canonical_turns: list[bool] = field(default_factory=list)  # per turn: encode(decode(ids)) == ids
    cut_of: str | None = None  # the scenario whose episode this one is cut from (``cut_episodes``)


def _call_names(message: Message) -> list[str]:
    return [c.get("function", c).get("name", "") for c in message.get("tool_calls") or []]


def parse_turn(
    renderer: Renderer, fmt: ToolCallFormat, ids: Sequence[int], stop_ids: Sequence[int], expected: Message
) -> tuple[Message, dict[str, Any], bool]:
    """What naive rollout code rebuilds from one sampled turn: decode (stop token off), parse with the format
    learnt from the template. Returns the message, the parse facts and whether the ids are canonical."""
    body = list(ids[:-1]) if ids and ids[-1] in set(stop_ids) else list(ids)
    text = renderer.decode(body, skip_special_tokens=False)
    want = _call_names(expected)
    got = fmt.parse(text, [c.get("id", "") for c in expected.get("tool_calls") or []])
    fact = {
        "calls_expected": len(want),
        "calls_parsed": len(got.get("tool_calls") or []),
        # None: nothing to parse (no call expected, or the template cannot show this many calls in a turn)
        "calls_ok": (_call_names(got) == want) if want and fmt.can_show(len(want)) else None,
    }
    return got, fact, renderer.encode(text) == body


class FormatCache:
    """One learnt format per template mode (kwargs such as enable_thinking change what a turn looks like)."""

    def __init__(self, stop_ids: Sequence[int]) -> None:
        self.stop_ids = tuple(stop_ids)
        self._by_mode: dict[str, ToolCallFormat] = {}

    def __call__(self, renderer: Renderer) -> ToolCallFormat:
        from tito_audit.rl.toolformat import learn_format

        key = repr(sorted(renderer.template_kwargs.items()))
        if key not in self._by_mode:
            self._by_mode[key] = learn_format(renderer, self.stop_ids)
        return self._by_mode[key]


def naive_view(renderer: Renderer, messages: Sequence[Message], tools: Any, stop_ids: Sequence[int]) -> View:
    """What naive rollout code trains on: render, encode, and mask each assistant turn from the renders."""
    stops = set(stop_ids)
    msgs = list(messages)
    ids = renderer.encode(renderer.render(msgs, tools=tools))
    mask = [0] * len(ids)
    turns: list[tuple[int, int]] = []
    last_end = 0
    for i, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        start = len(renderer.encode(renderer.render(msgs[:i], tools=tools, add_generation_prompt=True)))
        end = next((j + 1 for j in range(start, len(ids)) if ids[j] in stops), len(ids))
        for j in range(start, end):
            mask[j] = 1
        turns.append((min(start, len(ids)), max(min(start, len(ids)), end)))
        last_end = max(last_end, end)
    if msgs and msgs[-1]["role"] == "assistant" and 0 < last_end < len(ids):
        # The template renders text after the final stop token (Qwen's "\n"); no sampler emits it.
        ids, mask = ids[:last_end], mask[:last_end]
    return View(ids, mask, turns)


def noncanonical_split(tokenizer: Any, token_id: int) -> list[int] | None:
    """Two ids whose concatenated bytes equal ``token_id``'s (a split a sampler can emit), or None."""
    if token_id in set(getattr(tokenizer, "all_special_ids", []) or []):
        return None
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if not isinstance(piece, str) or len(piece) < 2 or piece in tokenizer.get_added_vocab():
        return None
    vocab = tokenizer.get_vocab()
    for k in range(len(piece) - 1, 0, -1):
        a, b = vocab.get(piece[:k]), vocab.get(piece[k:])
        if a is not None and b is not None:
            return [int(a), int(b)]
    return None


def apply_noncanonical(
    tokenizer: Any, view: View, logprobs: list[float | None], rate: float, rng: random.Random
) -> tuple[View, list[float | None], int]:
    """Re-split sampled tokens at ``rate`` (what a sampler may emit); the decoded text is unchanged."""
    if rate <= 0:
        return view, logprobs, 0
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float | None] = []
    count = 0
    for t, m, lp in zip(view.ids, view.mask, logprobs, strict=True):
        split = noncanonical_split(tokenizer, t) if m and rng.random() < rate else None
        if split is None:
            ids.append(t)
            mask.append(m)
            lps.append(lp)
        else:
            ids.extend(split)
            mask.extend([1, 1])
            lps.extend([None, None])
            count += 1
    return View(ids, mask), lps, count


def canonical_episodes(
    renderer: Renderer,
    scenarios: Sequence[Scenario],
    stop_ids: Sequence[int],
    noncanonical_rate: float = 0.0,
    seed: int = 0,
    format_for: Callable[[Renderer], ToolCallFormat] | None = None,
    cuts: list[Episode] | None = None,
) -> tuple[list[Episode], list[str]]:
    """Episodes whose sampled ids are the template's own tokenization (the audit's simulator).

    Returns the episodes and the ids of scenarios the template cannot render. ``cuts`` receives, for each episode
    whose re-render is exact, its cuts after appended messages whose re-render rewrites the history
    (``audit.episode_cuts``, ``cut_episodes``): the token facts count them, the batches do not play them.
    """
    rng = random.Random(seed)
    format_for = format_for or FormatCache(stop_ids)
    episodes: list[Episode] = []
    skipped: list[str] = []
    for sc in scenarios:
        sim = simulate(renderer, sc, stop_ids)
        if not sim.ok or sim.trajectory is None:
            skipped.append(sc.id)
            continue
        traj = sim.trajectory
        r = renderer.with_kwargs(**sc.kwargs) if sc.kwargs else renderer
        buffer = View(list(traj.input_ids), list(traj.loss_mask))
        lps: list[float | None] = list(traj.logprobs)
        buffer, lps, nc = apply_noncanonical(renderer.tokenizer, buffer, lps, noncanonical_rate, rng)
        # R: decode each turn B sampled, parse it with the template's own format, re-render, re-encode.
        parsed = list(sim.messages)
        facts = []
        spans = buffer.turns if len(buffer.turns) == len(sim.turns) else []
        for (a, e), turn in zip(spans, sim.turns, strict=False):
            msg, fact, _ = parse_turn(r, format_for(r), buffer.ids[a:e], stop_ids, sim.messages[turn.index])
            parsed[turn.index] = msg
            facts.append(fact)
        try:
            naive = naive_view(r, parsed, list(sc.tools), stop_ids)
            err = None
        except RenderError as exc:
            naive, err = View([], []), f"{exc.kind}: {exc.message}"
        if cuts is not None and err is None and naive.ids == buffer.ids and naive.mask == buffer.mask:
            cuts += cut_episodes(r, sim, parsed, stop_ids)  # (where the whole differs, that is this episode's fact)
        episodes.append(
            Episode(
                sc.id,
                buffer,
                naive,
                sim.messages,
                lps,
                noncanonical_tokens=nc,
                sampled_tokens=buffer.n_trained,
                naive_error=err,
                parses=facts,
            )
        )
    return episodes, skipped


def cut_episodes(renderer: Renderer, sim: Simulation, parsed: list[Message], stop_ids: Sequence[int]) -> list[Episode]:
    """The first cut of ``sim``'s episode whose naive re-render (``parsed`` up to the cut, no generation prompt)
    differs from the buffer before the appended block, as an episode of its own (none where every cut agrees): both
    views end where that block starts (what follows is untrained, and rendered otherwise without a generation prompt by
    design). The first only: the cuts of one episode are nested, and each would count the same trained tokens again.
    A cut the template refuses to render is passed over, as ``naive_rerender`` names it: naive code fails there
    loudly, it does not train on other tokens."""
    traj = sim.trajectory
    assert traj is not None
    for cut in cuts_of(sim):
        h = cut.history
        buffer = View(list(traj.input_ids[:h]), list(traj.loss_mask[:h]))
        try:
            full = naive_view(renderer, parsed[: cut.messages], list(sim.scenario.tools), stop_ids)
        except RenderError:
            continue
        naive = View(full.ids[:h], full.mask[:h])
        if naive.ids != buffer.ids or naive.mask != buffer.mask:
            label = cut.label(sim.scenario.id)
            return [Episode(label, buffer, naive, sim.messages[: cut.messages], cut_of=sim.scenario.id)]
    return []


def ending_episodes(ctx: AuditContext, stop_ids: Sequence[int]) -> list[Episode]:
    """The audit's episodes ended by a message the loop appended after the final answer (``episode_cuts.endings``)
    whose naive re-render rewrites the history, each an episode of its own: both views over the buffer's length."""
    out: list[Episode] = []
    for ending in endings(ctx):
        if ending.ids == ending.buffer:
            continue
        n = len(ending.buffer)
        sim = next(s for s in ctx.simulations if s.scenario.id == ending.scenario)
        try:
            full = naive_view(ctx.renderer_for(sim.scenario), ending.messages, ending.tools, stop_ids)
        except RenderError:
            continue  # (as a refused cut: ``cut_episodes``)
        naive, buffer = View(full.ids[:n], full.mask[:n]), View(ending.buffer, ending.loss_mask)
        out.append(Episode(ending.label, buffer, naive, ending.messages, cut_of=ending.scenario))
    return out


def assign_groups(episodes: list[Episode], group_size: int) -> None:
    for i, ep in enumerate(episodes):
        ep.group = i // max(1, group_size)


def group_advantages(episodes: Sequence[Episode], eps: float = 1e-6) -> list[float]:
    """GRPO: reward minus the group mean, divided by the group standard deviation (0 for a constant group)."""
    by_group: dict[int, list[float]] = {}
    for ep in episodes:
        by_group.setdefault(ep.group, []).append(ep.reward)
    out = []
    for ep in episodes:
        rs = by_group[ep.group]
        mean = sum(rs) / len(rs)
        std = (sum((r - mean) ** 2 for r in rs) / len(rs)) ** 0.5
        out.append(0.0 if std < eps else (ep.reward - mean) / (std + eps))
    return out
