"""Real rollouts from the policy, sampled in batches, each trajectory kept as a token buffer.

``generate`` samples (or completes greedily) a batch of prompts at once: prompts are left-padded, the attention
mask hides the padding and the position ids count only real tokens, so a padded row computes what the prompt
alone would (tested against one sequence at a time). Tokens are drawn on the model's device with the run's
generator; per step only the drawn ids and their log p travel to the host, once, at the end. The policy's log p
of each drawn token is recorded before processing (the trainer's pi); the draw is from the processed q
(``sampler_distribution``). On CUDA an fp32 policy samples under bf16 autocast, as an inference engine would, so
that ``sampler_vs_trainer`` measures a real precision mismatch.

``sample_episodes`` plays a batch of multi-turn episodes in lockstep: turn k of every episode that has one is
sampled in one batch, then each episode parses its turn, appends it to its buffer and appends the environment's
messages as token deltas.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tito_audit.errors import RenderError
from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.model import VocabMap, stop_model_ids
from tito_audit.policy.sampler_distribution import mask_padding, process_logits
from tito_audit.policy.view import View
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl.episodes import Episode, naive_view, parse_turn
from tito_audit.rl.toolformat import ToolCallFormat
from tito_audit.rollout.bridge import BridgeError
from tito_audit.rollout.buffer import Trajectory
from tito_audit.scenarios.spec import Scenario

__all__ = ["GenerationSettings", "generate", "sample_completion", "sample_episodes", "turn_reward"]

Message = dict[str, Any]
DISTINCT_BONUS = 0.01  # reward += 0.01 x (distinct sampled ids / sampled ids): ties within a group are rare


@functools.cache
def _cache_kwarg(forward: Any) -> str:
    """transformers renamed ``past_key_values`` to ``cache`` (5.2x); the floor (5.0) has the old name."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)
    return cache if cache is not None else getattr(output, "past_key_values", None)


@torch.no_grad()
def generate(
    model: Any,
    vmap: VocabMap,
    prompts: Sequence[Sequence[int]],
    stop_ids: Sequence[int],
    settings: GenerationSettings,
    generator: torch.Generator | None,
    *,
    greedy: bool = False,
    max_new: Sequence[int] | None = None,
) -> list[tuple[list[int], list[float]]]:
    """Per prompt: the new tokenizer ids up to and including a stop id, and the policy's log p of each.

    ``greedy`` takes the policy's most probable token (the settings' processing is not applied); ``max_new``
    bounds each row (default ``settings.max_new_tokens``).
    """
    if not prompts:
        return []
    device = next(model.parameters()).device
    rows = len(prompts)
    limits = torch.tensor(
        list(max_new) if max_new is not None else [settings.max_new_tokens] * rows, device=device
    ).clamp_min(1)
    width = max(len(p) for p in prompts)
    ids = torch.zeros(rows, width, dtype=torch.long, device=device)
    attn = torch.zeros(rows, width, dtype=torch.long, device=device)
    for r, p in enumerate(prompts):
        ids[r, width - len(p) :] = torch.tensor(vmap.to_model(p), device=device)
        attn[r, width - len(p) :] = 1
    stops = stop_model_ids(vmap, stop_ids)
    min_new = torch.tensor([settings.min_new(len(p)) for p in prompts], device=device)
    cache_kw = _cache_kwarg(type(model).forward)
    engine_like = device.type == "cuda" and next(model.parameters()).dtype == torch.float32
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if engine_like else contextlib.nullcontext()
    with autocast:
        return _decode(model, vmap, ids, attn, limits, stops, settings, generator, greedy, min_new, cache_kw)


def _decode(
    model: Any,
    vmap: VocabMap,
    ids: torch.Tensor,
    attn: torch.Tensor,
    limits: torch.Tensor,
    stops: list[int],
    settings: GenerationSettings,
    generator: torch.Generator | None,
    greedy: bool,
    min_new: torch.Tensor,
    cache_kw: str,
) -> list[tuple[list[int], list[float]]]:
    rows, device = ids.shape[0], ids.device
    pos = (attn.cumsum(-1) - 1).clamp_min(0)
    stop_t = torch.tensor(stops, device=device, dtype=torch.long)
    never = [vmap.unk] if vmap.unk is not None else []
    done = torch.zeros(rows, dtype=torch.bool, device=device)
    out_ids: list[torch.Tensor] = []
    out_lp: list[torch.Tensor] = []
    res = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
    for step in range(int(limits.max())):
        logits = mask_padding(res.logits[:, -1].float(), vmap.valid)
        logp = torch.log_softmax(logits, -1)
        if greedy:
            if never:
                logits[:, never] = float("-inf")
            tok = logits.argmax(-1)
        else:
            q = process_logits(logits, settings, step < min_new, stops, never).softmax(-1)
            tok = torch.multinomial(q, 1, generator=generator)[:, 0]
        tok = torch.where(done, torch.zeros_like(tok), tok)
        out_ids.append(tok)
        out_lp.append(logp.gather(1, tok[:, None])[:, 0])
        done = done | torch.isin(tok, stop_t) | (step + 1 >= limits)
        if bool(done.all()):
            break
        attn = torch.cat([attn, torch.ones(rows, 1, dtype=attn.dtype, device=device)], 1)
        pos = pos[:, -1:] + 1
        res = model(
            input_ids=tok[:, None],
            attention_mask=attn,
            position_ids=pos,
            use_cache=True,
            **{cache_kw: _cache_of(res)},
        )
    all_ids = torch.stack(out_ids, 1).tolist()
    all_lp = torch.stack(out_lp, 1).double().tolist()
    results = []
    stop_set = set(stops)
    for r in range(rows):
        n = 0
        limit = int(limits[r])
        while n < len(all_ids[r]) and n < limit:
            n += 1
            if all_ids[r][n - 1] in stop_set:
                break
        results.append((vmap.to_tok(all_ids[r][:n]), all_lp[r][:n]))
    return results


def sample_completion(
    model: Any,
    vmap: VocabMap,
    prompt: Sequence[int],
    stop_ids: Sequence[int],
    settings: GenerationSettings,
    generator: torch.Generator,
) -> tuple[list[int], list[float]]:
    """One prompt: ``generate`` with a batch of one."""
    return generate(model, vmap, [prompt], stop_ids, settings, generator)[0]


def _names(m: Message) -> list[str]:
    return [c.get("function", c).get("name", "") for c in m.get("tool_calls") or []]


def turn_reward(expected: Message, got: Message) -> float:
    """1 when the parsed turn calls the expected tools in order (or, without calls, answers in text), else 0."""
    want = _names(expected)
    if want:
        return 1.0 if _names(got) == want else 0.0
    return 1.0 if not got.get("tool_calls") and got.get("content") else 0.0


@dataclass
class _Play:
    """One episode being played: its trajectory and what its turns scored so far."""

    scenario: Scenario
    messages: list[Message]
    renderer: Renderer
    traj: Trajectory
    assistants: list[int]
    facts: list[dict[str, Any]] = field(default_factory=list)
    canonical: list[bool] = field(default_factory=list)
    score: float = 0.0

    def play_turn(
        self,
        n: int,
        ids: list[int],
        lps: list[float],
        stop_ids: Sequence[int],
        format_for: Callable[[Renderer], ToolCallFormat],
    ) -> None:
        r, messages, idx = self.renderer, self.messages, self.assistants[n]
        parsed, fact, is_canonical = parse_turn(r, format_for(r), ids, stop_ids, messages[idx])
        self.facts.append(fact)
        self.canonical.append(is_canonical)
        self.score += turn_reward(messages[idx], parsed)
        self.traj.append_sampled(ids, lps, message=parsed)
        nxt = self.assistants[n + 1] if n + 1 < len(self.assistants) else len(messages)
        env = messages[idx + 1 : nxt]
        if not env:
            return
        try:
            try:
                self.traj.append_messages(env)
            except RenderError:
                # The template cannot render what was parsed (a call it rejects): rollout code keeps the turn as
                # plain text, and so do we.
                text = r.decode(ids[:-1] if ids and ids[-1] in set(stop_ids) else ids, skip_special_tokens=False)
                self.traj.messages[-1] = {"role": "assistant", "content": text}
                self.facts[-1]["render_error"] = True
                self.traj.append_messages(env)
        except BridgeError as exc:
            # Code without the prefix check appends anyway; the buffer then holds what it would hold.
            self.traj.append_refused(env, exc)

    def episode(self, stop_ids: Sequence[int]) -> Episode:
        traj, r = self.traj, self.renderer
        buffer = View(list(traj.input_ids), list(traj.loss_mask))
        try:
            naive, err = naive_view(r, traj.messages, list(self.scenario.tools), stop_ids), None
        except RenderError as exc:
            naive, err = View([], []), f"{exc.kind}: {exc.message}"
        sampled = buffer.n_trained
        distinct = len(set(t for t, m in zip(buffer.ids, buffer.mask, strict=True) if m)) / max(1, sampled)
        return Episode(
            self.scenario.id,
            buffer,
            naive,
            traj.messages,
            list(traj.logprobs),
            reward=self.score / len(self.assistants) + DISTINCT_BONUS * distinct,
            noncanonical_tokens=self.canonical.count(False),
            sampled_tokens=sampled,
            naive_error=err,
            parses=self.facts,
            canonical_turns=self.canonical,
        )


def sample_episodes(
    model: Any,
    vmap: VocabMap,
    renderer: Renderer,
    plays: Sequence[tuple[Scenario, list[Message]]],
    stop_ids: Sequence[int],
    settings: GenerationSettings,
    generator: torch.Generator,
    format_for: Callable[[Renderer], ToolCallFormat],
) -> list[Episode]:
    """Play each (scenario, messages)'s assistant turns with the policy, turn k of all episodes in one batch;
    environment messages come from the scenario."""
    states: list[_Play] = []
    for scenario, messages in plays:
        r = renderer.with_kwargs(**scenario.kwargs) if scenario.kwargs else renderer
        traj = Trajectory(r, stop_ids, list(scenario.tools), on_truncated="mask")
        assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        traj.start(messages[: assistants[0]])
        states.append(_Play(scenario, messages, r, traj, assistants))
    for n in range(max(len(s.assistants) for s in states)):
        active = [s for s in states if n < len(s.assistants)]
        outs = generate(model, vmap, [s.traj.input_ids for s in active], stop_ids, settings, generator)
        for s, (ids, lps) in zip(active, outs, strict=True):
            s.play_turn(n, ids, lps, stop_ids, format_for)
    return [s.episode(stop_ids) for s in states]
