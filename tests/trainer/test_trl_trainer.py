"""A real TRL ``GRPOTrainer`` training on CPU, guarded and logged by ``tito_audit.trainer.trl`` (issue 30.1).

The model is a tiny randomly initialised ``Qwen2ForCausalLM`` built from a config (nothing downloaded) with the
bundled ``qwen2.5-7b-instruct`` tokenizer and template, which TRL's tool-calling support recognises as it is
(``add_response_schema``/``parse_response``; prefix-preserving, so TRL would keep it for tool loops).

The rollout is a controlled ``rollout_func``, not an SFT warm-up: a random model does not call tools, and a warm-up
makes tool calls likely, not certain, at CI cost. Here the engine emits a scripted tool call and answer (the
template's own rendering of them, as a model trained on it writes them), the policy scores them (its log-probs
are real), TRL's own parser reads the call, the tool runs, and TRL trains on the result. Every second episode's
tool call is sampled with one token split in two (a non-canonical split, same text, which real samplers emit):
that is what a decode -> re-render -> re-encode loop cannot reproduce, so the truth of where the wrong loop
diverges is known before anything is checked.

- correct loop: TRL 1.16's own (``GRPOTrainer._get_tool_suffix_ids``, PR #5242): prompt + sampled ids + tool
  suffix ids, concatenated;
- wrong loop: TRL before #5242: the conversation re-rendered with the parsed call and the tool result, re-encoded,
  and trained on (its tool mask computed from the sampled turn's length, as it was).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI

if importlib.util.find_spec("trl") is None and not IN_CI:  # in CI a missing trl fails on the import below
    pytest.skip("trl is not installed (pip install 'tito-audit[trl]')", allow_module_level=True)

import torch
from datasets import Dataset
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer
from trl.chat_template_utils import add_response_schema, parse_response
from typer.testing import CliRunner

from tito_audit import TitoGuardError
from tito_audit.cli import app
from tito_audit.replay.reader import iter_records
from tito_audit.testing.synthetic import Splitter
from tito_audit.trainer.trl import EPISODE_FIELD, TitoGuardMixin

MODEL = "qwen2.5-7b-instruct"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
WEATHER = {"Paris": "light rain, 14 °C", "Lisbon": "sunny, 22 °C", "Oslo": "snow, -3 °C", "Nairobi": "clear, 25 °C"}


def get_weather(city: str) -> str:
    return WEATHER[city]


class GuardedGRPOTrainer(TitoGuardMixin, GRPOTrainer):
    pass


class Rollout:
    """A TRL ``rollout_func``: two turns per episode (a tool call, the answer), the tool run in between."""

    def __init__(self, tokenizer: Any, wrong: bool, drop_tool_result: bool = False) -> None:
        self.tok, self.wrong, self.drop_tool_result = tokenizer, wrong, drop_tool_result
        self.split = Splitter(tokenizer)
        self.ids = itertools.count()
        self.truth: dict[str, int | None] = {}  # episode id -> first trained position that was not sampled

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(
            messages, tools=TOOLS, add_generation_prompt=generation_prompt, tokenize=False
        )

    def reply(self, history: list[dict[str, Any]], message: dict[str, Any]) -> list[int]:
        """The template's own rendering of ``message`` as the next reply, up to its stop token: what is sampled."""
        head, full = self.render(history, True), self.render([*history, message], False)
        assert full.startswith(head)
        text = full[len(head) :]
        return self.encode(text[: text.index(self.tok.eos_token) + len(self.tok.eos_token)])

    def split_one(self, ids: list[int]) -> list[int]:
        """The same text with one token sampled as two in-vocabulary pieces (the first token that has some)."""
        at = next(k for k, t in enumerate(ids) if k >= 2 and self.split(t))
        out = ids[:at] + self.split(ids[at]) + ids[at + 1 :]
        assert self.tok.decode(out) == self.tok.decode(ids)
        return out

    @staticmethod
    def logprobs(model: Any, context: list[int], ids: list[int]) -> list[float]:
        """The policy's log-probs of ``ids`` after ``context`` (the engine's, for a controlled engine)."""
        with torch.no_grad():  # the vocabulary-wide logits only where ids were sampled
            logits = model(torch.tensor([context + ids]), logits_to_keep=len(ids) + 1).logits[0, :-1].float()
        return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0].tolist()

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer: Any) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {
            k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", EPISODE_FIELD)
        }
        for row, prompt in enumerate(prompts):
            eid = f"{'wrong' if self.wrong or self.drop_tool_result else 'correct'}-{next(self.ids)}"
            messages = [dict(m) for m in prompt]
            city = next(c for c in WEATHER if c in messages[-1]["content"])
            prompt_ids = self.encode(self.render(messages, True))
            call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
            turn1 = self.reply(messages, {"role": "assistant", "content": "", "tool_calls": [call]})
            if row % 2:
                turn1 = self.split_one(turn1)
            lp1 = self.logprobs(trainer.model, prompt_ids, turn1)
            parsed1 = parse_response(self.tok, turn1, prefix=prompt_ids)  # TRL's own tool-call parser
            (tool_call,) = parsed1["tool_calls"]
            result = get_weather(**tool_call["function"]["arguments"])
            tool = {"role": "tool", "name": tool_call["function"]["name"], "content": result}
            history = [*messages, parsed1, tool]
            suffix = trainer._get_tool_suffix_ids([tool])  # TRL 1.16's tool suffix (PR #5242)
            if self.wrong:  # TRL before #5242: re-render the conversation and re-encode it
                context = self.encode(self.render(history, True))
                tool_length = len(context) - len(prompt_ids) - len(turn1)
                completion, mask = context[len(prompt_ids) :], [1] * len(turn1) + [0] * tool_length
                lps = lp1 + [0.0] * tool_length
            else:
                context = prompt_ids + turn1 + suffix
                completion, mask, lps = turn1 + suffix, [1] * len(turn1) + [0] * len(suffix), lp1 + [0.0] * len(suffix)
            if self.drop_tool_result:  # a common rollout bug: the engine continues after the tool result, the
                completion, mask, lps = turn1, [1] * len(turn1), lp1  # completion it returns lacks it
            turn2 = self.reply(history, {"role": "assistant", "content": f"It is {result} in {city}."})
            lp2 = self.logprobs(trainer.model, context, turn2)
            parsed2 = parse_response(self.tok, turn2, prefix=context)
            trained = prompt_ids + completion + turn2
            buffer = prompt_ids + turn1 + suffix + turn2  # what a token-in, token-out loop trains on
            self.truth[eid] = next((i for i, (a, b) in enumerate(zip(trained, buffer, strict=False)) if a != b), None)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion + turn2)
            out["logprobs"].append(lps + lp2)
            out["env_mask"].append(mask + [1] * len(turn2))
            out[EPISODE_FIELD].append(
                {
                    "id": eid,
                    "turns": [
                        {"ids": turn1, "logprobs": lp1, "prompt_ids": prompt_ids},
                        {"ids": turn2, "logprobs": lp2, "prompt_ids": context},
                    ],
                    "messages": [*history, parsed2],
                    "tools": TOOLS,
                }
            )
        return out


def reward_short(completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
    """Varies within a group (a split turn is one id longer), so that advantages and the loss are not zero."""
    return [-0.01 * len(c) for c in completion_ids]


@pytest.fixture(scope="module")
def tokenizer(loaded):
    tok = loaded(MODEL).tokenizer
    return add_response_schema(tok)  # what GRPOTrainer does for tool use; parse_response reads it


def build_trainer(tokenizer, tmp_path: Path, rollout: Rollout, log: Path, steps: int, batch: int) -> GuardedGRPOTrainer:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    cities = list(WEATHER)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Weather in {c}?"}]} for c in cities])
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=batch,  # batch / 2 prompts, two generations each
        num_generations=2,
        max_steps=steps,
        learning_rate=1e-2,
        beta=0.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
    )
    return GuardedGRPOTrainer(  # the integration: the mixin above and tito_log= here
        model=model,
        reward_funcs=reward_short,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout,
        tito_log=log,
    )


def replay(log: Path) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(app, ["replay", str(log), "--model", MODEL, "--format", "json", "--workers", "1"])
    return result.exit_code, json.loads(result.stdout)


def test_trl_grpo_correct_loop_is_guarded_logged_and_replays_exact(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = Rollout(tokenizer, wrong=False)
    log = tmp_path / "correct.jsonl.gz"
    trainer = build_trainer(tokenizer, tmp_path, rollout, log, steps=2, batch=2)  # CPU time is the loss's
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()

    assert trainer.state.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))  # it trained
    assert trainer.tito_checked == 4 and trainer.tito_failures == []  # every row of both steps checked, all exact
    assert trainer.tito_logprobs_checked == 4  # TRL's flattened logprobs (importance sampling) are the turns' own
    assert set(rollout.truth.values()) == {None}  # the loop's own truth: trained == buffer everywhere

    records = [r for _, r in iter_records(log)]
    assert [r["id"] for r in records] == list(rollout.truth)  # one record per episode, in rollout order
    assert all(sum(m["role"] == "tool" for m in r["messages"]) == 1 for r in records)  # each called the tool
    canonical = [tokenizer.encode(tokenizer.decode(r["turns"][0]["ids"]), add_special_tokens=False) for r in records]
    splits = sum(len(c) != len(r["turns"][0]["ids"]) for c, r in zip(canonical, records, strict=True))
    assert splits == 2

    code, report = replay(log)
    model = report["models"][0]
    totals = model["replay"]
    assert code == 0
    assert model["verdict"] == "tito-required"  # exact; naive re-tokenization would not be
    assert totals["episodes"] == 4 and totals["malformed"] == 0
    # compared against the engine's logged prompts (not only the sampled turns); the template's render measured drift
    assert totals["reference_engine"] == 4 and totals["drift_episodes"] == 4 and totals["drift_diverged"] == 0
    assert totals["diverged_episodes"] == 0
    assert totals["trained_not_sampled"] == totals["sampled_not_trained"] == totals["mask_flips"] == 0
    assert totals["whatif_diverged"] == splits == totals["noncanonical_turns"]  # exactly the split turns


def test_trl_grpo_retokenizing_loop_is_caught_by_the_guard_and_by_replay(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = Rollout(tokenizer, wrong=True)
    log = tmp_path / "wrong.jsonl"
    trainer = build_trainer(tokenizer, tmp_path, rollout, log, steps=2, batch=4)
    with pytest.raises(TitoGuardError) as caught:
        trainer.train()

    assert trainer.state.global_step == 0  # raised before the first loss: nothing was trained
    truth = {eid: pos for eid, pos in rollout.truth.items() if pos is not None}
    assert len(truth) == 2 and len(rollout.truth) == 4  # the two split episodes of the first batch, and only they
    found = {eid: f.divergence for eid, f in trainer.tito_failures}
    assert set(found) == set(truth)
    for eid, pos in truth.items():
        assert (found[eid].turn, found[eid].index, found[eid].cls) == (0, pos, "non_canonical")
    assert caught.value.result.first is not None and "episode ids: " in "".join(caught.value.__notes__)

    code, report = replay(log)
    model = report["models"][0]
    assert code == 1 and model["verdict"] == "unsafe"
    assert model["replay"]["episodes"] == 4 and model["replay"]["diverged_episodes"] == 2
    (divergence,) = [c for c in model["checks"] if c["id"] == "replay_divergence"]
    first = {}
    for f in divergence["findings"]:
        eid = f["scenario"].split("(")[1].split(")")[0]
        first.setdefault(eid, f)
    assert {eid: (f["index"], f["class"]) for eid, f in first.items()} == {
        eid: (pos, "non_canonical") for eid, pos in truth.items()
    }


def test_trl_grpo_rollout_that_drops_the_tool_result_is_caught_through_its_prompt_ids(tokenizer, tmp_path, monkeypatch):
    """Every sampled id is trained, with the mask on exactly the sampled ids, but turn 2 is trained right after
    turn 1, without the tool result it was sampled after. Only the turn's prompt_ids (what the engine was given)
    show it; the mixin passes them to the guard, which stops before the first loss (red-team r11)."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    rollout = Rollout(tokenizer, wrong=False, drop_tool_result=True)
    trainer = build_trainer(tokenizer, tmp_path, rollout, tmp_path / "dropped.jsonl", steps=1, batch=2)
    with pytest.raises(TitoGuardError, match="turn 1 was sampled on another context"):
        trainer.train()
    assert trainer.state.global_step == 0  # nothing was trained
    found = {eid: f for eid, f in trainer.tito_failures}
    assert set(found) == set(rollout.truth) and len(found) == 2
    for eid, f in found.items():
        d = f.divergence
        assert (d.turn, d.index, d.cls) == (1, rollout.truth[eid], "history_rewrite")
        assert f.trained_not_sampled == f.sampled_not_trained == 0 and "<tool_response>" in d.message
