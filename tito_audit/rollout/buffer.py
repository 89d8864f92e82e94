"""``Trajectory``: one episode's token buffer, the object RL rollout code keeps instead of a message list.

Rules it enforces:
- sampled ids are stored exactly as the engine produced them, up to and including the first stop token;
- environment messages are appended as a bridge (token delta), never by re-rendering the whole history;
- ``loss_mask`` is 1 exactly on sampled ids (the stop token included), 0 on prompt and bridge ids;
- an append the template cannot do prefix-preservingly is refused (``BridgeError``) with the reason;
- after a length-truncated completion (no stop token) an append is refused, or, with
  ``on_truncated="mask"``, the template's own turn end is inserted untrained so the context stays well-formed.

No torch needed: everything is lists of ints.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.bridge import Bridge, compute_bridge
from tito_audit.rollout.stop import stop_token_ids

Message = dict[str, Any]


class TruncatedCompletion(Exception):
    """An append was requested after a completion that never reached a stop token."""


@dataclass(frozen=True)
class Segment:
    kind: Literal["prompt", "sampled", "bridge", "turn_end"]
    start: int
    end: int
    messages: int  # index into Trajectory.messages of the first message this segment encodes


class Trajectory:
    """A multi-turn episode held as token ids.

    >>> traj = Trajectory.from_model(model, tools=tools)
    >>> prompt_ids = traj.start([{"role": "user", "content": "Weather in Paris?"}])
    >>> traj.append_sampled(engine_ids, logprobs=engine_logprobs, message=parsed_assistant_message)
    >>> traj.append_messages([{"role": "tool", "tool_call_id": "call00001", "content": "sunny"}])
    >>> traj.input_ids, traj.loss_mask, traj.logprobs
    """

    def __init__(
        self,
        renderer: Renderer,
        stop_ids: Sequence[int] | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        on_truncated: Literal["refuse", "mask"] = "refuse",
    ) -> None:
        self.renderer = renderer
        self.tools = list(tools) if tools else None
        self.stop_ids = tuple(stop_ids) if stop_ids is not None else stop_token_ids(renderer.tokenizer, renderer)
        self.on_truncated = on_truncated
        self.input_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float | None] = []
        self.messages: list[Message] = []
        self.segments: list[Segment] = []
        self.truncated = False
        self.bridges: list[Bridge] = []

    @classmethod
    def from_model(
        cls,
        model: Any,
        tools: Sequence[dict[str, Any]] | None = None,
        template_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Trajectory:
        """Build from a ``LoadedModel`` (see ``tito_audit.load``)."""
        renderer = Renderer(model.tokenizer, model.chat_template, template_kwargs)
        stops = stop_token_ids(model.tokenizer, renderer, model.generation_eos_ids)
        return cls(renderer, stops, tools, **kwargs)

    def _push(
        self,
        kind: Literal["prompt", "sampled", "bridge", "turn_end"],
        ids: Sequence[int],
        trained: bool,
        logprobs: Sequence[float] | None = None,
    ) -> None:
        start = len(self.input_ids)
        self.input_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([1 if trained else 0] * len(ids))
        self.logprobs.extend(list(logprobs) if logprobs is not None else [None] * len(ids))
        self.segments.append(Segment(kind, start, len(self.input_ids), len(self.messages)))

    def start(self, prompt_messages: Sequence[Message]) -> list[int]:
        """Render the prompt once (with the generation prompt); returns its ids."""
        if self.input_ids:
            raise ValueError("trajectory already started")
        ids = self.renderer.render_ids(prompt_messages, tools=self.tools, add_generation_prompt=True)
        self.messages.extend(copy.deepcopy(list(prompt_messages)))
        self._push("prompt", ids, trained=False)
        return ids

    def append_sampled(
        self,
        ids: Sequence[int],
        logprobs: Sequence[float] | None = None,
        message: Message | None = None,
    ) -> int:
        """Append engine output up to and including the first stop token; returns how many ids were kept.

        ``message`` is the parsed assistant message (content, tool_calls) used only to render later bridges;
        without it the decoded text is used as content. No stop token means a length-truncated completion.
        """
        if not self.input_ids:
            raise ValueError("call start() before append_sampled()")
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(f"{len(logprobs)} logprobs for {len(ids)} ids")
        stops = set(self.stop_ids)
        keep = next((i + 1 for i, t in enumerate(ids) if t in stops), len(ids))
        kept = list(ids[:keep])
        self.truncated = not kept or kept[-1] not in stops
        self._push("sampled", kept, trained=True, logprobs=None if logprobs is None else logprobs[:keep])
        if message is None:
            body = kept[:-1] if not self.truncated else kept
            message = {"role": "assistant", "content": self.renderer.decode(body, skip_special_tokens=True)}
        self.messages.append(copy.deepcopy(message))
        return keep

    def append_messages(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        """Append environment messages (tool results, user turns, system notices) as a token delta."""
        if not self.messages or self.messages[-1]["role"] != "assistant":
            raise ValueError("append_messages() follows an assistant turn (append_sampled())")
        bridge = compute_bridge(
            self.renderer, self.messages, messages, self.tools, self.stop_ids, add_generation_prompt
        )
        if self.truncated:
            if self.on_truncated == "refuse":
                raise TruncatedCompletion(
                    "the last completion hit the length limit without a stop token; a delta appended after it "
                    "would join text the model never closed (pass on_truncated='mask' to close it untrained)"
                )
            history = self.renderer.render_ids(self.messages, tools=self.tools)
            turn_end = [t for t in history[bridge.prefix_len - 1 : bridge.prefix_len] if t in set(self.stop_ids)]
            self._push("turn_end", turn_end or [self.stop_ids[0]], trained=False)
            self.truncated = False
        self.messages.extend(copy.deepcopy(list(messages)))
        self._push("bridge", bridge.ids, trained=False)
        self.bridges.append(bridge)
        return list(bridge.ids)

    def sampled_spans(self) -> list[tuple[int, int]]:
        return [(s.start, s.end) for s in self.segments if s.kind == "sampled"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_ids": list(self.input_ids),
            "loss_mask": list(self.loss_mask),
            "logprobs": list(self.logprobs),
        }
