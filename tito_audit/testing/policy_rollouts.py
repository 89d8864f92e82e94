"""Rollout logs sampled from a real policy, each written by a loop with a known bug or none (issue 38).

The engine is the policy itself (``tito_audit.rl.sampling.generate``: KV-cached decoding, the sampler's
temperature, top-k and top-p, raw log-probs of the sampled tokens, as vLLM logs them by default), run in float32 or
in bfloat16 (a copy of the weights, as an inference engine runs them beside a float32 trainer). Each episode is a
short conversation (``CONVERSATIONS``) kept in a ``Trajectory``: the sampled ids as sampled, environment messages
appended as the template's token deltas. A *loop* turns it into the native record a trainer would log:

- ``correct``: the buffer, each turn's ids, log-probs and ``prompt_ids`` as the engine gave and took them;
- ``retokenize``: the conversation re-rendered and re-encoded (``rl.episodes.naive_view``), what naive rollout
  code trains on;
- ``logprobs_shifted``: a correct loop whose logger is off by one: ``logprobs[k]`` holds the log-prob of
  ``ids[k + shift]`` (the edge repeats the last value it has);
- ``environment_as_sampled``: the environment's delta before each later turn (the tool result, rendered by the
  template) logged inside that turn's sampled ids with log-prob 0.0 and trained, its ``prompt_ids`` ending before
  it: the engine's prompts and the trained sequence still agree.

Nothing here decides what replay should find: a test states the truth (the loop, its shift) and replay must name it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.model import VocabMap
from tito_audit.rendering.renderer import Renderer
from tito_audit.replay.record import record_from_trajectory
from tito_audit.rl.episodes import naive_view
from tito_audit.rl.sampling import generate
from tito_audit.rollout.buffer import Trajectory

Message = dict[str, Any]
ASSISTANT: Message = {"role": "assistant"}  # a turn the policy samples

CONVERSATIONS: tuple[tuple[Message, ...], ...] = (
    (
        {"role": "user", "content": "What is the capital of France?"},
        ASSISTANT,
        {"role": "user", "content": "And of Italy?"},
        ASSISTANT,
    ),
    (
        {"role": "user", "content": "What is the weather in Paris? Use the tool."},
        ASSISTANT,
        {"role": "tool", "content": '{"city": "Paris", "temperature_c": 18, "sky": "sunny"}'},
        ASSISTANT,
    ),
    (
        {"role": "system", "content": "You answer in one short sentence."},
        {"role": "user", "content": "Name a prime number larger than ten."},
        ASSISTANT,
        {"role": "tool", "content": "13 is prime."},
        ASSISTANT,
    ),
    (
        {"role": "user", "content": "Give me a word that rhymes with cat."},
        ASSISTANT,
        {"role": "user", "content": "Another one, please."},
        ASSISTANT,
    ),
)
LOOPS = ("correct", "retokenize", "logprobs_shifted", "environment_as_sampled")


@dataclass
class PolicyEpisode:
    """One conversation sampled by the engine: the buffer a correct loop holds, and each turn's engine prompt."""

    traj: Trajectory
    prompts: list[list[int]]
    settings: GenerationSettings


def sample_episodes(
    engine: Any,
    renderer: Renderer,
    stop_ids: Sequence[int],
    settings: GenerationSettings,
    seed: int = 0,
    conversations: Sequence[Sequence[Message]] = CONVERSATIONS,
) -> list[PolicyEpisode]:
    """Each conversation played once, every assistant turn sampled by ``engine`` (a causal LM on the renderer's
    tokenizer ids) under ``settings``, from ``seed``."""
    vocab = VocabMap.full(engine.get_output_embeddings().weight.shape[0], valid=len(renderer.tokenizer))
    generator = torch.Generator().manual_seed(seed)
    out = []
    for conversation in conversations:
        traj = Trajectory(renderer, stop_ids, on_truncated="mask")
        slots = [i for i, m in enumerate(conversation) if m is ASSISTANT]
        traj.start(list(conversation[: slots[0]]))
        prompts: list[list[int]] = []
        for n, at in enumerate(slots):
            prompt = list(traj.input_ids)
            ids, lps = generate(engine, vocab, [prompt], stop_ids, settings, generator)[0]
            body = ids[:-1] if ids and ids[-1] in stop_ids else ids
            text = renderer.decode(body, skip_special_tokens=False)
            traj.append_sampled(ids, logprobs=lps, message={"role": "assistant", "content": text})
            prompts.append(prompt)
            nxt = slots[n + 1] if n + 1 < len(slots) else len(conversation)
            if nxt > at + 1:
                traj.append_messages(list(conversation[at + 1 : nxt]))
        out.append(PolicyEpisode(traj, prompts, settings))
    return out


def log_episode(ep: PolicyEpisode, loop: str, episode_id: str, shift: int = 1) -> dict[str, Any]:
    """The native record ``loop`` writes for ``ep`` (``LOOPS``); ``shift`` for ``logprobs_shifted``."""
    record = record_from_trajectory(ep.traj, episode_id)
    for turn, prompt in zip(record["turns"], ep.prompts, strict=True):
        turn["prompt_ids"] = list(prompt)
    record["sampling"] = _sampling(ep.settings)
    if loop == "correct":
        return record
    if loop == "retokenize":
        view = naive_view(ep.traj.renderer, ep.traj.messages, None, ep.traj.stop_ids)
        record["input_ids"], record["loss_mask"] = view.ids, view.mask
        return record
    if loop == "logprobs_shifted":
        for turn in record["turns"]:
            lps = turn["logprobs"]
            turn["logprobs"] = [lps[min(max(k + shift, 0), len(lps) - 1)] for k in range(len(lps))]
        return record
    if loop == "environment_as_sampled":
        return _environment_as_sampled(ep, record)
    raise ValueError(f"unknown loop {loop!r}; known: {', '.join(LOOPS)}")


def _environment_as_sampled(ep: PolicyEpisode, record: dict[str, Any]) -> dict[str, Any]:
    """Each later turn's ids begin with the environment's delta before it (log-prob 0.0), trained; its prompt ends
    where the previous turn's ids end."""
    out = copy.deepcopy(record)
    spans = ep.traj.sampled_spans()
    mask = list(out["loss_mask"])
    for k in range(1, len(spans)):
        gap = list(ep.traj.input_ids[spans[k - 1][1] : spans[k][0]])
        turn = out["turns"][k]
        turn["ids"] = gap + turn["ids"]
        turn["logprobs"] = [0.0] * len(gap) + turn["logprobs"]
        turn["prompt_ids"] = list(ep.traj.input_ids[: spans[k - 1][1]])
        mask[spans[k - 1][1] : spans[k][0]] = [1] * len(gap)
    out["loss_mask"] = mask
    return out


def _sampling(settings: GenerationSettings) -> dict[str, Any]:
    """The record's ``sampling`` object (what the engine drew with)."""
    return {"temperature": settings.temperature, "top_k": settings.top_k, "top_p": settings.top_p}
