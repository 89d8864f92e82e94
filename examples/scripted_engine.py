"""A stand-in inference engine for the framework examples (``verl_agent_loop.py``, ``skyrl_generator.py``), and
the replay they end with.

Given prompt ids, it reads the prompt as the model would (decoded text), asks a scripted policy what to say, and
"samples" that message as the template's own rendering of it (the text a model trained on this template writes),
up to and including the stop token, with made-up log-probs. Every ``split_every``-th reply comes out with one
token as two in-vocabulary pieces: the same text with other ids, which real samplers emit now and then and which
decode -> re-encode cannot reproduce. Runs offline on the bundled ``qwen2.5-7b-instruct`` tokenizer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tito_audit import Renderer
from tito_audit.replay import ReplayContext, ReplayTotals, replay_log
from tito_audit.testing.synthetic import Splitter

Message = dict[str, Any]
Policy = Callable[[str], Message]  # prompt text -> the assistant message the model answers with


class ScriptedEngine:
    def __init__(self, tokenizer: Any, tools: Sequence[Message] | None, policy: Policy, split_every: int = 3) -> None:
        self.renderer = Renderer(tokenizer, tokenizer.chat_template)
        self.tokenizer, self.tools, self.policy, self.split_every = tokenizer, list(tools or []), policy, split_every
        self.split = Splitter(tokenizer)
        self.replies = itertools.count()

    def reply_ids(self, message: Message) -> list[int]:
        """The template's rendering of ``message`` as a reply, encoded, through the stop token (eos)."""
        prompt = [{"role": "user", "content": "?"}]
        before = self.renderer.render(prompt, tools=self.tools or None, add_generation_prompt=True)
        after = self.renderer.render([*prompt, message], tools=self.tools or None)
        assert after.startswith(before), "the generation prompt is not a prefix of the assistant turn"
        eos = self.tokenizer.eos_token
        text = after[len(before) :]
        return [*self.renderer.encode(text[: text.index(eos)]), self.tokenizer.eos_token_id]

    def sample(self, prompt_ids: Sequence[int]) -> tuple[list[int], list[float]]:
        message = self.policy(self.tokenizer.decode(list(prompt_ids), skip_special_tokens=False))
        ids = self.reply_ids(message)
        if next(self.replies) % self.split_every == self.split_every - 1:
            at = next((k for k, t in enumerate(ids) if self.split(t)), None)
            if at is not None:
                ids = [*ids[:at], *self.split(ids[at]), *ids[at + 1 :]]
        return ids, [-0.05 - 0.1 * (i % 4) for i in range(len(ids))]


def replay_and_report(log: Path, model: Any, trajectories: int) -> ReplayTotals:
    """What both examples end with: replay the log they wrote and say what it found."""
    totals = replay_log(log, ReplayContext.from_model(model))
    print(f"{trajectories} trajectories logged to {log}")
    print(
        f"replay: {totals.episodes} episodes, {totals.diverged_episodes} diverged (trained never sampled "
        f"{totals.trained_not_sampled}); naive re-tokenization would diverge in {totals.whatif_diverged}"
    )
    return totals
