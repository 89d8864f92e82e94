"""A multi-turn tool episode kept in a ``tito_audit.Trajectory`` token buffer, next to the naive alternative.

A stand-in inference engine "samples" each scripted assistant turn as the template's own rendering of it (the
text a model trained on this template emits), tokenized, ending with the stop token, with made-up logprobs.
In the last turn it samples one word as two tokens (a non-canonical split, such as " umb" + "rella" for
" umbrella"): the text is identical, the ids are not, and real samplers do this now and then.

The buffer keeps exactly what was sampled and appends tool results as token deltas. Naive rollout code
instead re-renders the parsed conversation and re-tokenizes it; this script finds where that diverges from the
buffer.

The model is the bundled ``qwen2.5-7b-instruct`` (tokenizer and template only, runs offline): its template is
prefix-preserving and re-renders canonical tokens exactly (audit verdict "safe"), so the only divergence left
is the one re-encoding cannot undo, the sampled split; on a "tito-required" template naive code diverges even
without it. Pass another bundled name or Hub id as the first argument to try it.

    python examples/rollout_with_buffer.py [MODEL]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from tito_audit import AppendRefused, Renderer, Trajectory, load

Message = dict[str, Any]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_forecast",
            "description": "Tomorrow's forecast for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]


def call(call_id: str, name: str, **arguments: Any) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# What the policy "says" each turn (its parsed form: what a tool-call parser would return) ...
ASSISTANT_TURNS: list[Message] = [
    {"role": "assistant", "content": "", "tool_calls": [call("call00001", "get_weather", city="Paris")]},
    {"role": "assistant", "content": "", "tool_calls": [call("call00002", "get_forecast", city="Paris")]},
    {
        "role": "assistant",
        "content": "Light rain and 14 °C in Paris today, heavier showers tomorrow: take an umbrella both days.",
    },
]
# ... and what the environment answers after each turn but the last.
ENVIRONMENT: list[list[Message]] = [
    [{"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": '{"temp_c": 14, "sky": "rain"}'}],
    [{"role": "tool", "tool_call_id": "call00002", "name": "get_forecast", "content": '{"sky": "heavy showers"}'}],
]


class ScriptedEngine:
    """Stand-in for vLLM/SGLang: given prompt ids, returns (sampled ids ending with the stop token, logprobs)."""

    def __init__(self, renderer: Renderer, stop_ids: Sequence[int], turns: list[Message], split_turn: int) -> None:
        self.renderer, self.stop_ids, self.turns, self.split_turn = renderer, stop_ids, turns, split_turn
        self.calls = 0
        self.split: tuple[int, list[int]] | None = None  # (original id, the two ids sampled instead)

    def completion(self, message: Message) -> tuple[str, int]:
        """The template's rendering of ``message`` as a reply up to its first stop token, and that token."""
        prompt = [{"role": "user", "content": "?"}]
        before = self.renderer.render(prompt, tools=TOOLS, add_generation_prompt=True)
        after = self.renderer.render([*prompt, message], tools=TOOLS)
        assert after.startswith(before), "the generation prompt is not a prefix of the assistant turn"
        text = after[len(before) :]
        stops = {self.renderer.decode([i], skip_special_tokens=False): i for i in self.stop_ids}
        at, stop = min((text.find(s), s) for s in stops if s in text)
        return text[:at], stops[stop]

    def __call__(self, prompt_ids: Sequence[int]) -> tuple[list[int], list[float]]:
        assert prompt_ids, "an engine needs a prompt"
        n, self.calls = self.calls, self.calls + 1
        text, stop_id = self.completion(self.turns[n])
        ids = self.renderer.encode(text)
        if n == self.split_turn:
            ids = self.split_one_token(ids)
        ids.append(stop_id)
        return ids, [-0.05 - 0.1 * (i % 4) for i in range(len(ids))]

    def split_one_token(self, ids: list[int]) -> list[int]:
        """Sample the longest token that has a two-piece spelling in the vocabulary as those two pieces."""
        tok = self.renderer.tokenizer
        vocab = tok.get_vocab()
        special = set(tok.all_special_ids)
        best: tuple[int, int, list[int]] | None = None
        for pos, tid in enumerate(ids):
            piece = tok.convert_ids_to_tokens(tid)
            if tid in special or not isinstance(piece, str) or (best and len(piece) <= best[0]):
                continue
            for k in sorted(range(1, len(piece)), key=lambda k: abs(2 * k - len(piece))):
                if piece[:k] in vocab and piece[k:] in vocab:
                    best = (len(piece), pos, [vocab[piece[:k]], vocab[piece[k:]]])
                    break
        if best is None:
            return ids
        _, pos, pieces = best
        self.split = (ids[pos], pieces)
        return [*ids[:pos], *pieces, *ids[pos + 1 :]]


def token(renderer: Renderer, ids: Sequence[int], i: int) -> str:
    return f"{renderer.decode([ids[i]], skip_special_tokens=False)!r} (id {ids[i]})" if i < len(ids) else "<end>"


def main(model_name: str) -> None:
    model = load(model_name)  # bundled names load offline; any Hugging Face tokenizer works with from_tokenizer
    traj = Trajectory.from_tokenizer(model.tokenizer, tools=TOOLS)  # or Trajectory.from_model(model, tools=TOOLS)
    refused = [str(c) for c in traj.preflight() if c.ok is False]
    print(f"model: {model_name}; stop ids {list(traj.stop_ids)}; preflight refusals: {refused or 'none'}")

    engine = ScriptedEngine(traj.renderer, traj.stop_ids, ASSISTANT_TURNS, split_turn=len(ASSISTANT_TURNS) - 1)
    pieces = [traj.start([{"role": "user", "content": "What's the weather in Paris today and tomorrow?"}])]
    for n, parsed in enumerate(ASSISTANT_TURNS):
        ids, logprobs = engine(traj.input_ids)  # the whole buffer is the next prompt
        kept = traj.append_sampled(ids, logprobs=logprobs, message=parsed)
        pieces.append(ids[:kept])
        if n < len(ENVIRONMENT):
            try:
                pieces.append(traj.append_messages(ENVIRONMENT[n]))  # tool results as a token delta
            except AppendRefused as exc:  # BridgeError: this template rewrites the history for this append
                sys.exit(f"refused: {exc.reason}")
    if engine.split:
        original, two = engine.split
        print(f"engine sampled {token(traj.renderer, [original], 0)} as {[traj.renderer.decode([t]) for t in two]}")

    concatenated = [t for piece in pieces for t in piece]
    sampled = sum(len(p) for p in pieces[1::2])
    print(f"buffer ids == prompt + sampled + appended deltas: {traj.input_ids == concatenated}")
    print(
        f"aligned lengths (ids, loss_mask, logprobs): {len(traj.input_ids)}, {len(traj.loss_mask)}, "
        f"{len(traj.logprobs)}; trained ids {sum(traj.loss_mask)} == sampled ids {sampled}: "
        f"{sum(traj.loss_mask) == sampled}"
    )

    renderer = traj.renderer
    naive_text = renderer.render(traj.messages, tools=TOOLS)
    naive = renderer.encode(naive_text)  # re-render + re-tokenize, what naive rollout code trains on
    print(f"naive re-render + re-tokenize == buffer: {naive == traj.input_ids}")
    i = next((k for k, (a, b) in enumerate(zip(traj.input_ids, naive, strict=False)) if a != b), None)
    if i is None:
        i = min(len(naive), len(traj.input_ids))
    where = "a sampled (trained) token" if i < len(traj.loss_mask) and traj.loss_mask[i] else "not a sampled token"
    print(
        f"first divergent token: index {i} ({where}): buffer {token(renderer, traj.input_ids, i)}, "
        f"naive {token(renderer, naive, i)}"
    )
    same_text = naive_text.startswith(renderer.decode(traj.input_ids, skip_special_tokens=False))
    print(f"the re-rendered text starts with the buffer's text (same text, other ids): {same_text}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b-instruct")
