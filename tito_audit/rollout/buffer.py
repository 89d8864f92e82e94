"""``Trajectory``: one episode's token buffer, the object RL rollout code keeps instead of a message list.

Rules it enforces:
- sampled ids are stored exactly as the engine produced them, up to and including the first stop token
  (ids after it raise ``ValueError``, or are discarded with ``after_stop="drop"``);
- environment messages are appended as a bridge (token delta), never by re-rendering the whole history;
- ``loss_mask`` is 1 exactly on sampled ids (the stop token included), 0 on prompt, bridge and turn-end ids;
- ``logprobs`` is aligned with ``input_ids``: the engine's value on sampled ids, ``None`` everywhere else;
- an append the template cannot do prefix-preservingly is refused (``BridgeError``) with the reason;
- after a length-truncated completion (no stop token) an append is refused (``TruncatedCompletion``), or, with
  ``on_truncated="mask"``, the template's own turn end is inserted untrained so the context stays well-formed.
A refused append leaves the buffer unchanged.

No torch needed: everything is lists of ints, rendered through the sandboxed ``Renderer``.
"""

from __future__ import annotations

import copy
import marshal
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tito_audit.errors import RenderError, kind_of
from tito_audit.rendering.bounded_cache import content_key
from tito_audit.rendering.guard import RenderLimits
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.bridge import AppendRefused, Bridge, BridgeError, compute_bridge
from tito_audit.rollout.probes import APPEND_BASES, APPENDS, MINIMAL_TOOL_EPISODE, MINIMAL_TOOL_RESULT, TOOLS
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import first_of, sampled_ids, sampled_logprobs

Message = dict[str, Any]
SegmentKind = Literal["prompt", "sampled", "bridge", "turn_end"]
OnTruncated = Literal["refuse", "mask"]
AfterStop = Literal["error", "drop"]

# Renders in rollout code: bounded in time (main thread) and output size, without the audit's per-render
# RLIMIT_AS budget, which is process-wide.
LIBRARY_LIMITS = RenderLimits(memory_bytes=0)
LOGPROB_FILL = None  # value of ``Trajectory.logprobs`` where nothing was sampled (or the engine gave none)


def _copied(value: Any) -> Any:
    """A deep copy of messages the caller may change later. Plain JSON-like data (the usual case) goes through its
    content key (``marshal``: every value with its exact type), several times faster than ``copy.deepcopy``, which
    takes anything else."""
    key = content_key(value)
    return copy.deepcopy(value) if key is None else marshal.loads(key)


def _sampled_overlap(buffer: Sequence[int], delta: Sequence[int], stop_ids: Sequence[int], window: int = 8) -> int:
    """How many leading ids of ``delta`` the buffer already ends with, through a sampled stop token: a template
    that writes an assistant turn's end only once another message follows (GLM's next-turn opener ``<|user|>``)
    renders the stop the model sampled as the first token(s) of the next message's delta. 0 when it does not."""
    stops = set(stop_ids)
    for k in range(min(window, len(delta), len(buffer))):
        if delta[k] in stops and list(buffer[len(buffer) - k - 1 :]) == list(delta[: k + 1]):
            return k + 1
    return 0


class TruncatedCompletion(AppendRefused):
    """An append was requested after a completion that never reached a stop token."""


@dataclass(frozen=True)
class Segment:
    """A run of ``input_ids[start:end]`` added by one call (a truncated turn continued later is two segments)."""

    kind: SegmentKind
    start: int
    end: int
    # Trajectory.messages when it was pushed: for sampled ids, the index of their assistant message; for the prompt
    # and a bridge, pushed once their messages joined, the count of messages up to the last they encode
    messages: int


@dataclass(frozen=True)
class AppendCheck:
    """One preflight probe: can ``role`` be appended after an assistant turn in template mode ``mode``?"""

    role: str  # the appended role: "tool", "user" or "system"
    after: str  # the assistant turn it follows: "tool call" or "answer"
    probe: str  # the audit check whose probe conversation was used
    mode: dict[str, Any] = field(default_factory=dict)  # template kwargs rendered with (the trajectory's + probed)
    ok: bool | None = None  # None: the template does not render the probe at all
    reason: str = ""  # BridgeError / RenderError message when not ok

    def __str__(self) -> str:
        mode = ",".join(f"{k}={v}" for k, v in self.mode.items()) or "default"
        verdict = {True: "ok", False: "REFUSED", None: "n/a"}[self.ok]
        return f"{self.role} after {self.after} [{mode}] ({self.probe}): {verdict}" + (
            f" - {self.reason}" if self.reason else ""
        )


class Trajectory:
    """A multi-turn episode held as token ids.

    >>> traj = Trajectory.from_tokenizer(tokenizer, tools=tools, chat_template_kwargs={"enable_thinking": False})
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
        on_truncated: OnTruncated = "refuse",
        after_stop: AfterStop = "error",
    ) -> None:
        if on_truncated not in ("refuse", "mask"):
            raise ValueError(f"on_truncated must be 'refuse' or 'mask', not {on_truncated!r}")
        if after_stop not in ("error", "drop"):
            raise ValueError(f"after_stop must be 'error' or 'drop', not {after_stop!r}")
        self.renderer = renderer
        self.tools = list(tools) if tools else None
        self.stop_ids = tuple(stop_ids) if stop_ids is not None else stop_token_ids(renderer.tokenizer, renderer)
        if not self.stop_ids:
            raise ValueError("no stop token: pass the engine's stop_ids")
        self.on_truncated = on_truncated
        self.after_stop = after_stop
        self.input_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float | None] = []
        self.messages: list[Message] = []
        self.segments: list[Segment] = []
        self.bridges: list[Bridge] = []
        self.truncated = False  # the last sampled turn has not reached a stop token (yet)
        self._no_generation_prompt = False  # the last delta was appended without a generation prompt
        self._turn_start = 0  # where the current assistant turn's sampled ids begin

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        tools: Sequence[dict[str, Any]] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        *,
        chat_template: str | None = None,
        stop_ids: Sequence[int] | None = None,
        on_truncated: OnTruncated = "refuse",
        after_stop: AfterStop = "error",
        limits: RenderLimits = LIBRARY_LIMITS,
    ) -> Trajectory:
        """Build from any Hugging Face tokenizer; the template is resolved as ``apply_chat_template`` would.

        ``stop_ids`` defaults to the template's turn-end token plus the tokenizer's eos; pass your engine's list
        when it stops on more (e.g. ``generation_config.json``'s ``eos_token_id``). ``limits`` bound each render;
        the default keeps the time and output-size bounds but not the audit's per-render address-space cap,
        which is process-wide and would also starve other threads of a trainer.
        """
        if not callable(getattr(tokenizer, "apply_chat_template", None)):
            raise TypeError(f"Trajectory.from_tokenizer: expected a Hugging Face tokenizer, not {kind_of(tokenizer)}")
        template = chat_template if chat_template is not None else tokenizer.get_chat_template(tools=tools)
        renderer = Renderer(tokenizer, template, chat_template_kwargs, limits=limits)
        return cls(renderer, stop_ids, tools, on_truncated, after_stop)

    @classmethod
    def from_model(
        cls,
        model: Any,
        tools: Sequence[dict[str, Any]] | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        *,
        on_truncated: OnTruncated = "refuse",
        after_stop: AfterStop = "error",
        limits: RenderLimits = LIBRARY_LIMITS,
    ) -> Trajectory:
        """Build from a ``LoadedModel`` (see ``tito_audit.load``): the audited template, stops incl. generation eos."""
        if not all(hasattr(model, a) for a in ("tokenizer", "chat_template", "generation_eos_ids")):
            raise TypeError(f"Trajectory.from_model: expected a LoadedModel (tito_audit.load), not {kind_of(model)}")
        renderer = Renderer(model.tokenizer, model.chat_template, chat_template_kwargs, limits=limits)
        stops = stop_token_ids(model.tokenizer, renderer, model.generation_eos_ids)
        return cls(renderer, stops, tools, on_truncated, after_stop)

    # -- building ---------------------------------------------------------------------------------

    def _push(
        self,
        kind: SegmentKind,
        ids: Sequence[int],
        trained: bool,
        logprobs: Sequence[float | None] | None = None,
    ) -> None:
        start = len(self.input_ids)
        self.input_ids.extend(map(int, ids))
        self.loss_mask.extend([1 if trained else 0] * len(ids))
        self.logprobs.extend(list(logprobs) if logprobs is not None else [LOGPROB_FILL] * len(ids))
        self.segments.append(Segment(kind, start, len(self.input_ids), len(self.messages)))
        if kind != "sampled":
            self.truncated = False  # anything but more sampled ids closes the open turn

    def _awaiting_sample(self) -> bool:
        """The buffer ends with a generation prompt (the prompt, or a delta rendered with one)."""
        last = self.segments[-1].kind if self.segments else None
        return last == "prompt" or (last == "bridge" and not self._no_generation_prompt)

    def start(self, prompt_messages: Sequence[Message]) -> list[int]:
        """Render the prompt once, with the generation prompt; returns its ids (send them to the engine)."""
        if self.input_ids or self.segments:
            raise ValueError("trajectory already started")
        if not prompt_messages:
            raise ValueError("start() needs at least one message")
        ids = self.renderer.render_ids(prompt_messages, tools=self.tools, add_generation_prompt=True)
        self.messages.extend(_copied(list(prompt_messages)))
        self._push("prompt", ids, trained=False)
        return list(ids)

    def append_sampled(
        self,
        ids: Sequence[int],
        logprobs: Sequence[float] | None = None,
        message: Message | None = None,
    ) -> int:
        """Append engine output up to and including the first stop token; returns how many ids were kept.

        Ids after the stop token raise ``ValueError`` (``after_stop="error"``) or are discarded
        (``after_stop="drop"``). Without a stop token the turn stays open (``truncated``): a further call
        continues the same turn (streamed chunks); an append then refuses or masks (``on_truncated``).
        ``message`` is the parsed assistant message (content, tool_calls), used only to render later deltas;
        without it the decoded text of the turn is the content.
        """
        if not self.segments:
            raise ValueError("call start() before append_sampled()")
        if not self._awaiting_sample() and not self.truncated:
            raise ValueError("the last turn is closed: append environment messages (with a generation prompt) first")
        ints = sampled_ids(ids)  # never truncated or coerced: a float with a fraction or a bool is no id
        if logprobs is not None:
            logprobs = sampled_logprobs(logprobs)
            if len(logprobs) != len(ints):
                raise ValueError(f"{len(logprobs)} logprobs for {len(ints)} ids")
        stops = set(self.stop_ids)
        first_stop = first_of(ints, stops)
        keep = first_stop + 1 if first_stop is not None else len(ints)
        if keep < len(ints) and self.after_stop == "error":
            tok = self.renderer.decode([ints[keep - 1]], skip_special_tokens=False)
            raise ValueError(
                f"{len(ints) - keep} id(s) after the stop token {tok!r} at position {keep - 1}: the engine should "
                "stop there (pass after_stop='drop' to discard them)"
            )
        continuing = self.truncated
        if not continuing:
            self._turn_start = len(self.input_ids)
        kept = ints[:keep]
        self._push("sampled", kept, trained=True, logprobs=None if logprobs is None else list(logprobs[:keep]))
        self.truncated = not kept or kept[-1] not in stops
        if message is None:
            turn = self.input_ids[self._turn_start :]
            body = turn if self.truncated else turn[:-1]
            message = {"role": "assistant", "content": self.renderer.decode(body, skip_special_tokens=True)}
        if continuing:
            self.messages[-1] = _copied(message)
        else:
            self.messages.append(_copied(message))
        return keep

    def append_messages(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
        """Append environment messages (tool results, user turns, system notices) as a token delta.

        Pass all messages of one environment step in one call. An empty list with the generation prompt appends
        the generation prompt alone: the model takes another assistant turn with no message between (a loop that
        lets it go on after it stopped, or one that keeps a text and a call as two assistant messages). Returns
        the ids appended (turn end, if masked, then the delta). Raises ``BridgeError`` when the template rewrites
        the history for this append, ``TruncatedCompletion`` after a truncated completion with
        ``on_truncated="refuse"``, ``RenderError`` when the template rejects the conversation itself; in every
        case nothing is appended.
        """
        if not self.messages or self.messages[-1].get("role") != "assistant" or self._awaiting_sample():
            raise ValueError("append_messages() follows a sampled assistant turn (append_sampled())")
        if not messages and not add_generation_prompt:
            raise ValueError("append_messages() needs a message, or the generation prompt (another assistant turn)")
        if any(m.get("role") == "assistant" for m in messages):
            raise ValueError("assistant turns are sampled: use append_sampled(), not append_messages()")
        if self.truncated and self.on_truncated == "refuse":
            raise TruncatedCompletion(
                "the last completion hit the length limit without a stop token; a delta appended after it "
                "would join text the model never closed (pass on_truncated='mask' to close it untrained)"
            )
        bridge = compute_bridge(
            self.renderer, self.messages, messages, self.tools, self.stop_ids, add_generation_prompt
        )
        ids = list(bridge.ids)
        if not bridge.stop_rendered and not self.truncated:
            ids = ids[_sampled_overlap(self.input_ids, ids, self.stop_ids) :]
        appended: list[int] = []
        if self.truncated:
            # Close the turn the way the template does (its stop token, if it writes one), untrained.
            turn_end = [bridge.stop_id] if bridge.stop_rendered and bridge.stop_id is not None else []
            if turn_end:
                self._push("turn_end", turn_end, trained=False)
            appended += turn_end
        self.messages.extend(_copied(list(messages)))
        self._push("bridge", ids, trained=False)
        self.bridges.append(bridge)
        self._no_generation_prompt = not add_generation_prompt
        return appended + ids

    def append_refused(self, messages: Sequence[Message], refusal: BridgeError) -> list[int]:
        """Append ``messages`` although the template refused them: the ids it would add, ``refusal.forced_ids``.

        For code that measures what happens without the prefix check (the audit's simulator, replay, the RL
        sampler): ``append_messages`` raised ``refusal`` because the template rewrites the history for this
        append, and the caller keeps going with the tokens a naive loop would append (the tail of the new render
        after the same stop token), untrained. The buffer then no longer equals any render of ``messages``.
        """
        self.messages.extend(_copied(list(messages)))
        self._push("bridge", refusal.forced_ids, trained=False)
        return list(refusal.forced_ids)

    # -- checks -----------------------------------------------------------------------------------

    def preflight(self, modes: Sequence[dict[str, Any]] | None = None) -> list[AppendCheck]:
        """Which append kinds this template refuses, probed up front with the audit's own probe conversations.

        Runs ``tool_append_prefix``'s minimal probe and ``append_matrix``'s tool/user/system probes through the
        same ``compute_bridge`` the buffer uses, in the trajectory's template mode, or in each of ``modes``
        (template kwargs merged over the trajectory's, e.g. ``[{"enable_thinking": True}, {...: False}]``).
        Uses the trajectory's tools when it has some (templates may require their fields). Cheap: a few renders.
        """
        probes: list[tuple[str, str, str, list[Message], list[Message], Any]] = [
            ("tool", "tool call", "tool_append_prefix", MINIMAL_TOOL_EPISODE, MINIMAL_TOOL_RESULT, None)
        ]
        for base_name, base in APPEND_BASES.items():
            for role, new in APPENDS.items():
                if role == "assistant" or (role == "tool" and base_name == "after_answer"):
                    continue
                after = base_name.removeprefix("after_").replace("call", "tool call")
                probes.append((role, after, "append_matrix", base, new, list(TOOLS)))
        results: list[AppendCheck] = []
        for mode in modes or [{}]:
            renderer = self.renderer.with_kwargs(**mode) if mode else self.renderer
            kwargs = dict(renderer.template_kwargs)
            for role, after, probe, base, new, probe_tools in probes:
                tools = self.tools or probe_tools
                try:
                    compute_bridge(renderer, base, new, tools, self.stop_ids)
                    results.append(AppendCheck(role, after, probe, kwargs, True))
                except BridgeError as exc:
                    results.append(AppendCheck(role, after, probe, kwargs, False, exc.reason))
                except RenderError as exc:
                    results.append(AppendCheck(role, after, probe, kwargs, None, f"{exc.kind}: {exc.message}"))
        return results

    # -- export -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def prompt_length(self) -> int:
        """Ids of the initial prompt (what ``start`` rendered)."""
        return self.segments[0].end if self.segments else 0

    def sampled_spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` of every sampled run: exactly where ``loss_mask`` is 1."""
        return [(s.start, s.end) for s in self.segments if s.kind == "sampled" and s.end > s.start]

    def to_dict(self, logprob_fill: float | None = LOGPROB_FILL) -> dict[str, Any]:
        """``input_ids``, ``loss_mask`` and ``logprobs`` (``logprob_fill`` where not sampled), same length."""
        return {
            "input_ids": list(self.input_ids),
            "loss_mask": list(self.loss_mask),
            "logprobs": [logprob_fill if lp is None else lp for lp in self.logprobs],
        }
