"""Real rollouts from the policy: pure sampling by default, the trajectory kept as a token buffer.

Pure sampling means temperature 1, top_k=0 (off), top_p=1, no min_new_tokens / min_length.
``--generation-kwargs`` lets a
user reproduce their own settings; anything else makes samples that the policy rates lower than plain
sampling would, which is what turns the k1 KL estimator negative. On CUDA, sampling runs under bf16 autocast
(as an inference engine would) while the gradient is recomputed in fp32.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tito_audit.errors import RenderError, UsageError
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl.episodes import Episode, View, naive_view, parse_turn
from tito_audit.rl.model import VocabMap
from tito_audit.rl.toolformat import ToolCallFormat
from tito_audit.rollout.bridge import BridgeError
from tito_audit.rollout.buffer import Trajectory
from tito_audit.scenarios.spec import Scenario

Message = dict[str, Any]


@dataclass(frozen=True)
class GenerationSettings:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_new_tokens: int = 0
    max_new_tokens: int = 96
    min_length: int = 0  # transformers' min_length counts the prompt too

    @property
    def pure(self) -> bool:
        return (
            self.temperature == 1.0
            and self.top_k == 0
            and self.top_p >= 1.0
            and self.min_new_tokens == 0
            and self.min_length == 0
        )

    def min_new(self, prompt_len: int) -> int:
        """Stop tokens are suppressed for this many new tokens (min_length minus the prompt, as transformers)."""
        return max(self.min_new_tokens, self.min_length - prompt_len)

    @classmethod
    def parse(cls, text: str | None, max_new_tokens: int) -> GenerationSettings:
        if not text:
            return cls(max_new_tokens=max_new_tokens)
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError("rl", f"--generation-kwargs is not JSON: {exc.msg}") from exc
        if not isinstance(raw, dict):
            raise UsageError("rl", "--generation-kwargs must be a JSON object")
        known = {
            "temperature",
            "top_k",
            "top_p",
            "min_new_tokens",
            "max_new_tokens",
            "do_sample",
            "min_length",
        }
        unknown = sorted(set(raw) - known)
        if unknown:
            raise UsageError("rl", f"--generation-kwargs: unsupported key(s) {', '.join(unknown)}")
        if raw.get("do_sample") is False:
            raise UsageError("rl", "--generation-kwargs: do_sample=false (greedy) has no sampling distribution")
        try:
            s = cls(
                float(raw.get("temperature", 1.0)),
                int(raw.get("top_k", 0) or 0),
                float(raw.get("top_p", 1.0)),
                int(raw.get("min_new_tokens", 0) or 0),
                int(raw.get("max_new_tokens", max_new_tokens)),
                int(raw.get("min_length", 0) or 0),
            )
        except (TypeError, ValueError) as exc:
            raise UsageError("rl", f"--generation-kwargs: {exc}") from exc
        if s.temperature <= 0 or not 0 < s.top_p <= 1 or s.top_k < 0 or s.max_new_tokens < 1:
            raise UsageError(
                "rl",
                "--generation-kwargs: need temperature > 0, 0 < top_p <= 1, top_k >= 0, max_new_tokens >= 1",
            )
        return s


def _process(
    logits: torch.Tensor, s: GenerationSettings, step: int, stop_model_ids: list[int], min_new: int
) -> torch.Tensor:
    x = logits / s.temperature
    if step < min_new and stop_model_ids:
        x[stop_model_ids] = float("-inf")
    if s.top_k > 0 and s.top_k < x.numel():
        kth = torch.topk(x, s.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if s.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = sorted_x.softmax(-1)
        drop = probs.cumsum(-1) - probs > s.top_p
        x = x.clone()
        x[order[drop]] = float("-inf")
    return x


@torch.no_grad()
def sample_completion(
    model: Any,
    vmap: VocabMap,
    prompt: Sequence[int],
    stop_ids: Sequence[int],
    settings: GenerationSettings,
    generator: torch.Generator,
) -> tuple[list[int], list[float]]:
    """Sample up to a stop token; returns tokenizer ids and the policy's log p of each (before processing)."""
    device = next(model.parameters()).device
    stops_model = (
        [i for i, t in enumerate(vmap.model_to_tok or []) if t in set(stop_ids)]
        if not vmap.is_full
        else [int(t) for t in stop_ids]
    )
    ids = torch.tensor([vmap.to_model(prompt)], device=device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    out_ids: list[int] = []
    out_lp: list[float] = []
    past = None
    with autocast:
        for step in range(settings.max_new_tokens):
            res = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = res.past_key_values
            logits = res.logits[0, -1].float()
            if vmap.valid is not None:
                logits[vmap.valid :] = float("-inf")  # padded embedding rows are no tokens
            logp = torch.log_softmax(logits, -1)
            processed = _process(logits, settings, step, stops_model, settings.min_new(len(prompt)))
            if vmap.unk is not None:
                processed[vmap.unk] = float("-inf")
            probs = processed.softmax(-1)
            tok = int(torch.multinomial(probs.cpu(), 1, generator=generator)[0])
            out_ids.append(tok)
            out_lp.append(float(logp[tok]))
            if tok in stops_model:
                break
            ids = torch.tensor([[tok]], device=device)
    return vmap.to_tok(out_ids), out_lp


def _names(m: Message) -> list[str]:
    return [c.get("function", c).get("name", "") for c in m.get("tool_calls") or []]


def turn_reward(expected: Message, got: Message) -> float:
    want = _names(expected)
    if want:
        return 1.0 if _names(got) == want else 0.0
    return 1.0 if not got.get("tool_calls") and got.get("content") else 0.0


def sample_episode(
    model: Any,
    vmap: VocabMap,
    renderer: Renderer,
    scenario: Scenario,
    messages: list[Message],
    stop_ids: Sequence[int],
    settings: GenerationSettings,
    generator: torch.Generator,
    format_for: Callable[[Renderer], ToolCallFormat],
) -> Episode:
    """Play ``messages``' assistant turns with the policy; environment messages come from the scenario."""
    r = renderer.with_kwargs(**scenario.kwargs) if scenario.kwargs else renderer
    tools = list(scenario.tools)
    traj = Trajectory(r, stop_ids, tools, on_truncated="mask")
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    traj.start(messages[: assistants[0]])
    score = 0.0
    facts: list[dict[str, Any]] = []
    canonical: list[bool] = []
    for n, idx in enumerate(assistants):
        ids, lps = sample_completion(model, vmap, traj.input_ids, stop_ids, settings, generator)
        parsed, fact, is_canonical = parse_turn(r, format_for(r), ids, stop_ids, messages[idx])
        facts.append(fact)
        canonical.append(is_canonical)
        score += turn_reward(messages[idx], parsed)
        traj.append_sampled(ids, lps, message=parsed)
        nxt = assistants[n + 1] if n + 1 < len(assistants) else len(messages)
        env = messages[idx + 1 : nxt]
        if env:
            try:
                try:
                    traj.append_messages(env)
                except RenderError:
                    # The template cannot render what was parsed (a call it rejects): rollout code keeps the
                    # turn as plain text, and so do we.
                    text = r.decode(ids[:-1] if ids and ids[-1] in set(stop_ids) else ids, skip_special_tokens=False)
                    traj.messages[-1] = {"role": "assistant", "content": text}
                    facts[-1]["render_error"] = True
                    traj.append_messages(env)
            except BridgeError as exc:
                # Code without the prefix check appends anyway; the buffer then holds what it would hold.
                traj.append_refused(env, exc)
    buffer = View(list(traj.input_ids), list(traj.loss_mask))
    try:
        naive, err = naive_view(r, traj.messages, tools, stop_ids), None
    except RenderError as exc:
        naive, err = View([], []), f"{exc.kind}: {exc.message}"
    sampled = buffer.n_trained
    distinct = len(set(t for t, m in zip(buffer.ids, buffer.mask, strict=True) if m)) / max(1, sampled)
    ep = Episode(
        scenario.id,
        buffer,
        naive,
        traj.messages,
        list(traj.logprobs),
        reward=score / len(assistants) + 0.01 * distinct,
        noncanonical_tokens=canonical.count(False),
        sampled_tokens=sampled,
        naive_error=err,
        parses=facts,
        canonical_turns=canonical,
    )
    return ep
