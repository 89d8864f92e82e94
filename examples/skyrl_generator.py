"""Where to call ``tito_audit.LogWriter`` in SkyRL's generator, so that ``tito-audit replay`` can check it.

SkyRL's ``GeneratorOutput`` keeps the trained ids and mask but not the ids sampled per turn (replay's ``skyrl``
adapter then has to take the runs of ``loss_mask`` = 1 as the turns). ``LoggedSkyRLGymGenerator`` below is what
you add: a ``SkyRLGymGenerator`` subclass that keeps what the inference engine client was given and returned each
turn (per trajectory: each ``agent_loop`` runs in its own asyncio task) and the chat history as SkyRL updates it
(``_update_chat_history``), and writes one record per trajectory when ``agent_loop`` returns, with the ids and mask
SkyRL trains on. The ids are taken where the engine returns them, not where SkyRL appends them, so that what
SkyRL does in between (an appended eos, a re-encoded ``postprocessed_action``) is what replay checks.

SkyRL is not imported: the classes above the line are minimal stand-ins with SkyRL's names and control flow,
taken from NovaSky-AI/SkyRL at a956457 (Aug 2026):
- ``skyrl/train/generators/skyrl_gym_generator.py``: ``SkyRLGymGenerator`` (``agent_loop(prompt, env_class,
  env_extras, max_tokens, max_input_length, sampling_params, trajectory_id)``, ``inference_engine_client``,
  ``base_conversation`` / ``base_conversation_token_ids`` and ``get_obs_ids_from_obs``, ``_update_chat_history``,
  ``_update_agent_loop_state_with_multiturn_chat_template``), ``AgentLoopState`` (``chat_history``, ``input_ids``,
  ``loss_mask``, ``rollout_logprobs``, ``response_end_idx``, ``done``), ``TurnOutput`` (``output``,
  ``output_ids``, ``output_logprobs``, ``new_obs``, ``obs_ids``, ``added_eos``, ``get_turn_loss_mask``),
  ``TrajectoryOutput`` (``response_ids``, ``reward``, ``stop_reason``, ``loss_mask``, ``prompt_ids``,
  ``rollout_logprobs``); the engine input's ``prompt_token_ids``; the engine output's ``responses``,
  ``response_ids``, ``stop_reasons``, ``response_logprobs``; the env step's ``observations``, ``reward``, ``done``,
  ``postprocessed_action``;
- ``skyrl/train/generators/utils.py``: ``get_generation_prompt_ids``;
- ``skyrl/train/generators/base.py``: ``TrajectoryID`` (``instance_id``, ``repetition_id``, ``to_string``),
  ``GeneratorInput`` (``prompts``, ``env_classes``, ``env_extras``, ``trajectory_ids``).
The stand-ins simplify: the engine is scripted (``scripted_engine.py``), the environment is a toy weather search,
there is no batching, step-wise training or custom chat template.

    python examples/skyrl_generator.py [OUT_DIR]
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripted_engine import ScriptedEngine, replay_and_report

from tito_audit import load
from tito_audit.trainer.writer import LogWriter

MODEL = "qwen2.5-7b-instruct"
WEATHER = {"Paris": "light rain, 14 °C", "Lisbon": "sunny, 22 °C", "Oslo": "snow, -3 °C", "Nairobi": "clear, 25 °C"}


# -- stand-ins for SkyRL (names as in the files above) --------------------------------------------------------


@dataclass
class TrajectoryID:
    instance_id: str
    repetition_id: int

    def to_string(self) -> str:
        return f"{self.instance_id}_{self.repetition_id}"


@dataclass
class TrajectoryOutput:
    response_ids: list[int]
    reward: float
    stop_reason: str
    loss_mask: list[int]
    prompt_ids: list[int]
    rollout_logprobs: list[float] | None


@dataclass
class AgentLoopState:
    chat_history: list[dict[str, Any]]
    input_ids: list[int]
    loss_mask: list[int]
    rollout_logprobs: list[float] | None
    response_end_idx: int | None
    done: bool


@dataclass
class TurnOutput:
    output: str
    output_ids: list[int]
    output_logprobs: list[float] | None
    new_obs: list[dict[str, Any]]
    obs_ids: list[int]
    reward: float | None
    added_eos: bool = False

    def get_turn_loss_mask(self) -> list[int]:
        sampled = [1] * len(self.output_ids) if not self.added_eos else [1] * (len(self.output_ids) - 1) + [0]
        return sampled + [0] * len(self.obs_ids)


class InferenceEngineClient:
    def __init__(self, engine: ScriptedEngine) -> None:
        self.engine = engine

    async def generate(self, engine_input: dict[str, Any]) -> dict[str, Any]:
        ids, logprobs = self.engine.sample(engine_input["prompt_token_ids"][0])
        text = self.engine.tokenizer.decode(ids, skip_special_tokens=False)
        return {"responses": [text], "response_ids": [ids], "stop_reasons": ["stop"], "response_logprobs": [logprobs]}


class WeatherEnv:
    """A SkyRL-gym text env: ``init(chat_history)``, ``step(action) -> {observations, reward, done}``."""

    def init(self, chat_history: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        return chat_history, {}

    def step(self, action: str) -> dict[str, Any]:
        query = re.search(r"<search>weather in (\w+)</search>", action)
        if query:
            observation = f"<information>{WEATHER[query.group(1)]}</information>"
            return {"observations": [{"role": "user", "content": observation}], "reward": 0.0, "done": False}
        return {"observations": [], "reward": 1.0 if "<answer>" in action else 0.0, "done": True}


class SkyRLGymGenerator:
    def __init__(self, inference_engine_client: Any, tokenizer: Any) -> None:
        self.inference_engine_client, self.tokenizer = inference_engine_client, tokenizer
        self.base_conversation = [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "I am a user."},
        ]
        ids = tokenizer.apply_chat_template(self.base_conversation, tokenize=True, return_dict=False)
        last_eos = len(ids) - 1 - ids[::-1].index(tokenizer.eos_token_id)
        self.base_conversation_token_ids = ids[: last_eos + 1]  # so that observation ids start after the eos
        empty = [{"role": "user", "content": ""}]  # generators/utils.py get_generation_prompt_ids
        plain = tokenizer.apply_chat_template(empty, tokenize=True, return_dict=False)
        with_prompt = tokenizer.apply_chat_template(empty, add_generation_prompt=True, tokenize=True, return_dict=False)
        self.generation_prompt_ids = with_prompt[len(plain) :]

    async def agent_loop(
        self,
        prompt: list[dict[str, Any]],
        env_class: str,
        env_extras: dict[str, Any],
        max_tokens: int,
        max_input_length: int,
        sampling_params: dict[str, Any] | None = None,
        trajectory_id: TrajectoryID | None = None,
    ) -> TrajectoryOutput:
        env = WeatherEnv()
        chat_history, _ = env.init(list(prompt))
        initial_input_ids = self.tokenizer.apply_chat_template(
            chat_history, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        initial_prompt_length = len(initial_input_ids)
        state = AgentLoopState(chat_history, list(initial_input_ids), [], [], None, False)
        stop_reason, reward = "stop", 0.0
        while not state.done:
            if len(state.input_ids) > max_input_length:
                stop_reason = "length"
                break
            engine_output = await self.inference_engine_client.generate({"prompt_token_ids": [state.input_ids]})
            output, output_ids = engine_output["responses"][0], engine_output["response_ids"][0]
            response_logprobs = engine_output["response_logprobs"][0]
            step = env.step(output)
            state.done, reward = step["done"], step["reward"]
            if step.get("postprocessed_action") is not None:  # SkyRL warns: this path re-encodes text
                output = step["postprocessed_action"]
                output_ids = self.tokenizer.encode(output, add_special_tokens=False)
            obs_ids = self.get_obs_ids_from_obs(step["observations"], state.done)
            turn_output = TurnOutput(output, output_ids, response_logprobs, step["observations"], obs_ids, reward)
            state = self._update_agent_loop_state_with_multiturn_chat_template(state, turn_output)
        end = state.response_end_idx - initial_prompt_length + 1
        return TrajectoryOutput(
            response_ids=state.input_ids[initial_prompt_length : state.response_end_idx + 1],
            reward=reward,
            stop_reason=stop_reason,
            loss_mask=state.loss_mask[:end],
            prompt_ids=state.input_ids[:initial_prompt_length],
            rollout_logprobs=state.rollout_logprobs[:end] if state.rollout_logprobs is not None else None,
        )

    def get_obs_ids_from_obs(self, new_obs: list[dict[str, Any]], is_done: bool) -> list[int]:
        if new_obs:
            ids = self.tokenizer.apply_chat_template(
                [*self.base_conversation, *new_obs], add_generation_prompt=not is_done, tokenize=True, return_dict=False
            )
            return ids[len(self.base_conversation_token_ids) :]
        return [] if is_done else list(self.generation_prompt_ids)

    def _update_chat_history(self, chat_history: list[dict[str, Any]], output: str, new_obs: list[dict[str, Any]]):
        if output.endswith(self.tokenizer.eos_token):
            output = output[: -len(self.tokenizer.eos_token)]
        return [*chat_history, {"role": "assistant", "content": output}, *new_obs]

    def _update_agent_loop_state_with_multiturn_chat_template(
        self, agent_loop_state: AgentLoopState, turn_output: TurnOutput
    ) -> AgentLoopState:
        agent_loop_state.chat_history = self._update_chat_history(
            agent_loop_state.chat_history, turn_output.output, turn_output.new_obs
        )
        agent_loop_state.response_end_idx = len(agent_loop_state.input_ids) + len(turn_output.output_ids) - 1
        agent_loop_state.input_ids += turn_output.output_ids + turn_output.obs_ids
        agent_loop_state.loss_mask += turn_output.get_turn_loss_mask()
        if agent_loop_state.rollout_logprobs is not None and turn_output.output_logprobs is not None:
            agent_loop_state.rollout_logprobs += turn_output.output_logprobs + [0.0] * len(turn_output.obs_ids)
        return agent_loop_state


# -- what you add: one record per trajectory --------------------------------------------------------------------

_EPISODE: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("tito_episode")  # per asyncio task


class RecordedClient:
    """The inference engine client, keeping each answer in the calling trajectory's episode (engine ids as returned,
    before SkyRL appends an eos or re-encodes a post-processed action)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def generate(self, engine_input: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        output = await self.inner.generate(engine_input, **kwargs)
        logprobs = output.get("response_logprobs")
        _EPISODE.get()["turns"].append(
            {
                "ids": list(output["response_ids"][0]),  # a copy: SkyRL may append an eos to this list
                "logprobs": list(logprobs[0]) if logprobs else None,
                "prompt_ids": list(engine_input["prompt_token_ids"][0]),
            }
        )
        return output


class LoggedSkyRLGymGenerator(SkyRLGymGenerator):
    def __init__(self, *args: Any, log: LogWriter, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inference_engine_client = RecordedClient(self.inference_engine_client)
        # one writer per generator process, each on a name of its own (two writers on one name refuse each other),
        # e.g. LogWriter(f"rollouts/skyrl-{os.getpid()}.parquet"), or per_rank_path("rollouts/skyrl.parquet")
        self.log = log

    def _update_chat_history(self, chat_history: list[dict[str, Any]], output: str, new_obs: list[dict[str, Any]]):
        history = super()._update_chat_history(chat_history, output, new_obs)
        _EPISODE.get()["messages"] = history  # the chat as SkyRL keeps it
        return history

    async def agent_loop(self, prompt: list[dict[str, Any]], *args: Any, **kwargs: Any) -> TrajectoryOutput:
        _EPISODE.set({"turns": [], "messages": list(prompt)})
        output = await super().agent_loop(prompt, *args, **kwargs)
        episode = _EPISODE.get()
        messages = episode["messages"]
        # the final observation is not trained: the record ends with the last assistant turn
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        trajectory_id = kwargs.get("trajectory_id")
        self.log.write_episode(
            sampled=[t["ids"] for t in episode["turns"]],
            logprobs=[t["logprobs"] for t in episode["turns"]],
            prompt_ids=[t["prompt_ids"] for t in episode["turns"]],
            input_ids=output.prompt_ids + output.response_ids,
            loss_mask=[0] * len(output.prompt_ids) + output.loss_mask,
            messages=messages[: last + 1],
            id=trajectory_id.to_string() if trajectory_id is not None else None,
        )
        return output


# -- a run ---------------------------------------------------------------------------------------------------


def policy(prompt: str) -> dict[str, Any]:
    """The scripted model: search for the asked city's weather, then answer."""
    city = re.findall(r"Weather in (\w+)\?", prompt)[-1]
    found = re.findall(r"<information>(.*?)</information>", prompt)
    if not found:
        return {"role": "assistant", "content": f"<search>weather in {city}</search>"}
    return {"role": "assistant", "content": f"<answer>{city}: {found[-1]}</answer>"}


async def generate(generator: LoggedSkyRLGymGenerator) -> list[TrajectoryOutput]:
    tasks = [
        generator.agent_loop(
            [{"role": "user", "content": f"Weather in {city}?"}],
            "weather",
            {},
            max_tokens=256,
            max_input_length=4096,
            trajectory_id=TrajectoryID(city.lower(), 0),
        )
        for city in WEATHER
    ]
    return await asyncio.gather(*tasks)  # one task per trajectory: each has its own _EPISODE


def main(out_dir: Path) -> Path:
    model = load(MODEL)
    path = out_dir / "skyrl-rollouts.parquet"
    client = InferenceEngineClient(ScriptedEngine(model.tokenizer, None, policy))
    with LogWriter(path) as log:
        outputs = asyncio.run(generate(LoggedSkyRLGymGenerator(client, model.tokenizer, log=log)))
    (part,) = log.paths
    replay_and_report(part, model, len(outputs))
    return part


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
