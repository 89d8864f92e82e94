"""Where to call ``tito_audit.LogWriter`` in verl's tool agent loop, so that ``tito-audit replay`` can check it.

verl's own rollout dump (``trainer.rollout_data_dir``) writes decoded text only, so replay cannot read it; the
agent loop holds the ids and drops them. ``LoggedToolAgentLoop`` below is what you add: a ``ToolAgentLoop``
subclass (register it under its own name and select it as the agent loop) that keeps, per trajectory, what the
engine was given and returned each turn, and writes one record when the trajectory ends, with the ids and mask
verl trains on.

verl is not imported: the classes above the line are minimal stand-ins with verl's names and control flow, taken
from verl-project/verl at 1dda039 (Aug 2026):
- ``verl/experimental/agent_loop/tool_agent_loop.py``: ``ToolAgentLoop`` (``run``, ``_handle_pending_state``,
  ``_handle_generating_state``, ``_handle_processing_tools_state``, ``_build_assistant_message``, ``tool_schemas``,
  ``response_length``) and ``AgentData`` (``messages``, ``request_id``, ``prompt_ids``, ``response_ids``,
  ``response_mask``, ``response_logprobs``, ``tool_calls``);
- ``verl/experimental/agent_loop/agent_loop.py``: ``AgentLoopBase`` (``server_manager``, ``tokenizer``,
  ``apply_chat_template_kwargs``; the Continuous Token merges ``ct_merge_assistant_token`` and
  ``ct_merge_non_assistant_msg``, simplified here to ids in, ids out), ``AgentLoopOutput`` (``prompt_ids``,
  ``response_ids``, ``response_mask``, ``response_logprobs``, ``num_turns``), and
  ``AgentLoopWorker._run_agent_loop``, which makes one agent loop instance per trajectory (so instance state is
  per trajectory);
- ``verl/workers/rollout/replica.py``: ``TokenOutput`` (``token_ids``, ``log_probs``, ``stop_reason``);
  ``verl/workers/rollout/llm_server.py``: ``generate(request_id, *, prompt_ids, sampling_params, ...)``;
- ``verl/experimental/agent_loop/tool_parser.py``: ``FunctionCall`` (``name``, ``arguments`` as JSON text).
The stand-ins simplify: the engine is scripted (``scripted_engine.py``), the Continuous Token builder is a plain
append plus a tool-message delta, tools are plain functions, nothing is multimodal.

    python examples/verl_agent_loop.py [OUT_DIR]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import sys
import tempfile
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from scripted_engine import ScriptedEngine, replay_and_report

from tito_audit import load
from tito_audit.trainer.writer import LogWriter

MODEL = "qwen2.5-7b-instruct"
TOOL_SCHEMAS = [
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


# -- stand-ins for verl (names as in the files above) --------------------------------------------------------


@dataclass
class TokenOutput:
    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = None


@dataclass
class FunctionCall:
    arguments: str  # JSON text, as the model wrote it
    name: str
    tool_call_id: str | None = None


@dataclass
class AgentLoopOutput:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None = None
    num_turns: int = 0
    extra_fields: dict[str, Any] = field(default_factory=dict)


class AgentState(Enum):
    PENDING = "pending"
    GENERATING = "generating"
    PROCESSING_TOOLS = "processing_tools"
    TERMINATED = "terminated"


class AgentData:
    def __init__(self, messages: list[dict[str, Any]], request_id: str) -> None:
        self.messages, self.request_id = messages, request_id
        self.prompt_ids: list[int] = []
        self.response_ids: list[int] = []
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] = []
        self.tool_calls: list[FunctionCall] = []
        self.user_turns = self.assistant_turns = 0


class ServerManager:
    """The LLM server client: ``generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput``."""

    def __init__(self, engine: ScriptedEngine) -> None:
        self.engine = engine

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any]) -> TokenOutput:
        ids, logprobs = self.engine.sample(prompt_ids)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")


class ToolAgentLoop:
    _ids = itertools.count()

    def __init__(self, server_manager: Any, tokenizer: Any, tools: dict[str, Any], response_length: int = 2048) -> None:
        self.server_manager, self.tokenizer, self.tools = server_manager, tokenizer, tools
        self.tool_schemas = TOOL_SCHEMAS
        self.apply_chat_template_kwargs: dict[str, Any] = {}
        self.response_length = response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        agent_data = AgentData(list(kwargs["raw_prompt"]), f"req-{next(self._ids)}")
        state = AgentState.PENDING
        while state != AgentState.TERMINATED:
            if state == AgentState.PENDING:
                state = await self._handle_pending_state(agent_data, sampling_params)
            elif state == AgentState.GENERATING:
                state = await self._handle_generating_state(agent_data, sampling_params)
            else:
                state = await self._handle_processing_tools_state(agent_data)
        response_ids = agent_data.prompt_ids[-len(agent_data.response_mask) :]
        prompt_ids = agent_data.prompt_ids[: len(agent_data.prompt_ids) - len(agent_data.response_mask)]
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[: self.response_length],
            response_mask=agent_data.response_mask[: self.response_length],
            response_logprobs=agent_data.response_logprobs[: self.response_length] or None,
            num_turns=agent_data.user_turns + agent_data.assistant_turns + 1,
        )

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        agent_data.prompt_ids = self.tokenizer.apply_chat_template(
            agent_data.messages, tools=self.tool_schemas, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return AgentState.GENERATING

    async def _handle_generating_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        output = await self.server_manager.generate(
            request_id=agent_data.request_id, prompt_ids=agent_data.prompt_ids, sampling_params=sampling_params
        )
        agent_data.assistant_turns += 1
        agent_data.response_ids = output.token_ids
        merged = self.ct_merge_assistant_token(agent_data.prompt_ids, output.token_ids)
        added = len(merged) - len(agent_data.prompt_ids)
        agent_data.prompt_ids = merged
        agent_data.response_mask += [1] * added
        agent_data.response_logprobs += (output.log_probs or [])[:added]
        text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
        agent_data.tool_calls = [
            FunctionCall(name=c["name"], arguments=json.dumps(c["arguments"], ensure_ascii=False))
            for c in map(json.loads, re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL))
        ]
        content = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.DOTALL).strip()
        agent_data.messages.append(self._build_assistant_message(content, agent_data))
        return AgentState.PROCESSING_TOOLS if agent_data.tool_calls else AgentState.TERMINATED

    def ct_merge_assistant_token(self, runtime_token_ids: list[int], assistant_token_ids: list[int]) -> list[int]:
        """The Continuous Token merge of an assistant turn (here: the sampled ids, appended as they are)."""
        return runtime_token_ids + assistant_token_ids

    def _build_assistant_message(self, content: str, agent_data: AgentData) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content or ""}
        if agent_data.tool_calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": json.loads(c.arguments)}}
                for c in agent_data.tool_calls
            ]
        return message

    async def _handle_processing_tools_state(self, agent_data: AgentData) -> AgentState:
        previous_messages = list(agent_data.messages)
        for call in agent_data.tool_calls:
            result = self.tools[call.name](**json.loads(call.arguments))
            agent_data.messages.append({"role": "tool", "content": result})
        # ct_merge_non_assistant_msg: the new messages' ids, after the stop token the model sampled
        before = self.tokenizer.apply_chat_template(
            previous_messages, tools=self.tool_schemas, tokenize=True, return_dict=False
        )
        after = self.tokenizer.apply_chat_template(
            agent_data.messages, tools=self.tool_schemas, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        stop = len(before) - before[::-1].index(self.tokenizer.eos_token_id)
        assert after[:stop] == before[:stop], "this template rewrites the history for a tool append"
        delta = after[stop:]
        agent_data.prompt_ids = agent_data.prompt_ids + delta
        agent_data.response_mask += [0] * len(delta)
        if agent_data.response_logprobs:
            agent_data.response_logprobs += [0.0] * len(delta)
        agent_data.user_turns += 1
        return AgentState.GENERATING


# -- what you add: one record per trajectory --------------------------------------------------------------------


class RecordedServer:
    """This trajectory's engine calls, as the engine saw and answered them (wraps the shared server manager)."""

    def __init__(self, server_manager: Any) -> None:
        self.inner, self.turns = server_manager, []

    async def generate(self, request_id: str, *, prompt_ids: list[int], **kwargs: Any) -> TokenOutput:
        output = await self.inner.generate(request_id, prompt_ids=prompt_ids, **kwargs)
        self.turns.append({"ids": list(output.token_ids), "logprobs": output.log_probs, "prompt_ids": list(prompt_ids)})
        return output


class LoggedToolAgentLoop(ToolAgentLoop):
    # one writer per worker process, each on a name of its own (two writers on one name refuse each other):
    # e.g. LogWriter(f"rollouts/verl-{os.getpid()}.jsonl.gz", max_bytes=...)
    log: LogWriter

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server_manager = RecordedServer(self.server_manager)  # one agent loop instance per trajectory

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        self.agent_data = agent_data  # its messages, as the loop keeps them
        return await super()._handle_pending_state(agent_data, sampling_params)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        output = await super().run(sampling_params, **kwargs)
        turns = self.server_manager.turns
        self.log.write_episode(
            sampled=[t["ids"] for t in turns],
            logprobs=[t["logprobs"] for t in turns],
            prompt_ids=[t["prompt_ids"] for t in turns],
            input_ids=output.prompt_ids + output.response_ids,  # what the actor trains on (before padding)
            loss_mask=[0] * len(output.prompt_ids) + output.response_mask,
            messages=self.agent_data.messages,
            tools=self.tool_schemas,
            chat_template_kwargs=self.apply_chat_template_kwargs,
            id=self.agent_data.request_id,
        )
        self.log.flush()
        return output


# -- a run ---------------------------------------------------------------------------------------------------


def policy(prompt: str) -> dict[str, Any]:
    """The scripted model: call the tool for the asked city, then answer with its result."""
    city = re.findall(r"Weather in (\w+)\?", prompt)[-1]
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.DOTALL)
    if not results:
        call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
        return {"role": "assistant", "content": "", "tool_calls": [call]}
    return {"role": "assistant", "content": f"{city}: {results[-1]}."}


async def rollouts(tokenizer: Any, log: LogWriter) -> list[AgentLoopOutput]:
    server = ServerManager(ScriptedEngine(tokenizer, TOOL_SCHEMAS, policy))
    LoggedToolAgentLoop.log = log
    loops = [LoggedToolAgentLoop(server, tokenizer, {"get_weather": lambda city: WEATHER[city]}) for _ in WEATHER]
    prompts = [[{"role": "user", "content": f"Weather in {city}?"}] for city in WEATHER]
    return await asyncio.gather(
        *(loop.run({"temperature": 1.0}, raw_prompt=p) for loop, p in zip(loops, prompts, strict=True))
    )


def main(out_dir: Path) -> Path:
    model = load(MODEL)
    path = out_dir / "verl-rollouts.jsonl.gz"
    with LogWriter(path) as log:
        outputs = asyncio.run(rollouts(model.tokenizer, log))
    replay_and_report(path, model, len(outputs))
    return path


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
