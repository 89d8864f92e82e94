"""The conversation shapes a template accepts, found by probing renders (never from a model name).

``probe_shapes`` renders one small tool episode in each shape (nested or flat calls, dict or string arguments,
content None or ``""`` next to calls, the ``tool`` role or results as user turns, each framing) until one shows
the call, its arguments and its result, and finds how reasoning reaches the render. ``Shapes.apply`` then
rewrites every scenario into that shape with the rewrites of ``scenarios.adapt``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tito_audit.errors import RenderError, detached
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.probes import SHAPE_PROBE_ARGS, SHAPE_PROBE_RESULT, SHAPE_PROBE_TOOL
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.scenarios.adapt import (
    FRAMERS,
    arguments_string,
    call_content,
    flat_calls,
    named_call_ids,
    reasoning_field,
    reasoning_inline,
    reasoning_of,
    retag_inline,
    tool_as_user,
)
from tito_audit.scenarios.reasoning import SCENARIO_FIELD, Reasoning, derive_reasoning
from tito_audit.scenarios.shown_values import MARKER, in_place, letters_present, name_in_place, shown, with_text
from tito_audit.scenarios.spec import Message

CANONICAL = ("nested", "dict", "none", "tool")  # call shape, arguments, content next to calls, tool-result role


@dataclass(frozen=True)
class Probe:
    """One probe render of the episode in one shape: the error, or what of the tool traffic it shows."""

    error: RenderError | None = None
    shows_call: bool = False
    shows_arguments: bool = False
    shows_result: bool = False
    shows_id: bool = False  # the call's id renders where its name does not

    @property
    def shows_all(self) -> bool:
        return self.error is None and self.shows_call and self.shows_arguments and self.shows_result


@dataclass(frozen=True)
class Shapes:
    """The conversation shapes a template accepts, derived from probe renders (never from a model name).

    ``calls``/``arguments``/``content``/``tool_role`` are the shape the scenarios are played in; a choice other
    than ``CANONICAL``'s is an adaptation the user's rollout code must make too. ``drops``: what the template
    does not render in that shape (``tool_calls``, ``arguments``, ``tool_results``). ``empty_content_drops``:
    the calls vanish when content is ``""`` (scenarios then send None). ``reasoning``: how reasoning reaches the
    render, derived from the template (``scenarios.reasoning``): the field or the delimiters it reads, and what
    no scenario exercises.
    """

    calls: str = "nested"
    arguments: str = "dict"
    content: str = "none"
    tool_role: str = "tool"
    drops: tuple[str, ...] = ()
    rejects_tools: str | None = None  # why no shape renders a tool conversation
    empty_content_drops: bool = False
    reasoning: Reasoning = field(default_factory=Reasoning)
    framing: tuple[str, ...] = ()  # FRAMINGS: what every message needed before anything rendered
    named_ids: bool = False  # call ids carry the function name (the template writes the id in the name's place)

    @property
    def canonical_content(self) -> str | None:
        """The content sent next to tool calls in this shape."""
        return "" if self.content == "empty" else None

    @property
    def adaptations(self) -> tuple[str, ...]:
        out = list(self.framing)
        if self.calls == "flat":
            out.append("flat_tool_calls")
        if self.arguments == "string":
            out.append("arguments_string")
        if self.content == "empty":
            out.append("content_empty")
        elif self.empty_content_drops:
            out.append("content_none")
        if self.tool_role == "user":
            out.append("tool_as_user")
        if self.named_ids:
            out.append("named_call_ids")
        if self.reasoning.mode == "inline":
            out.append("reasoning_inline")
        if self.reasoning.emits is not None:
            out.append("reasoning_emitted")
        return tuple(out)

    def apply(self, messages: list[Message]) -> tuple[list[Message], tuple[str, ...]]:
        """The messages in this shape, and the adaptations that changed them."""
        used: list[str] = []
        out = messages
        steps: list[tuple[str, Callable[[list[Message]], list[Message]]]] = []
        if self.arguments == "string":
            steps.append(("arguments_string", arguments_string))
        if self.calls == "flat":
            steps.append(("flat_tool_calls", flat_calls))
        if self.content == "empty":
            steps.append(("content_empty", lambda ms: call_content(ms, None, "")))
        elif self.empty_content_drops:
            steps.append(("content_none", lambda ms: call_content(ms, "", None)))
        reasoning = self.reasoning
        if reasoning.mode == "field" and reasoning.field != SCENARIO_FIELD:
            steps.append(("reasoning_field", lambda ms: reasoning_field(ms, reasoning.field)))
        if reasoning.mode == "inline":
            steps.append(("reasoning_inline", lambda ms: reasoning_inline(ms, reasoning.tags)))
        if reasoning.mode in ("inline", "emitted") and reasoning.tags != ("<think>", "</think>"):
            steps.append(("reasoning_tags", lambda ms: retag_inline(ms, reasoning.tags)))
        if self.named_ids:
            steps.append(("named_call_ids", named_call_ids))
        if self.tool_role == "user":
            steps.append(("tool_as_user", tool_as_user))
        steps += [(name, FRAMERS[name]) for name in self.framing]
        for name, step in steps:
            adapted = step(out)
            if adapted != out:
                if name not in ("reasoning_field", "reasoning_tags"):  # the template's own spelling: no adaptation
                    used.append(name)
                out = adapted
        if reasoning.emits is not None and any(self._emitted(m) for m in out):
            used.append("reasoning_emitted")
        return out, tuple(used)

    def _emitted(self, message: Message) -> bool:
        """The model writes this message's reasoning where the template does not show it."""
        r = self.reasoning
        if not reasoning_of(message, r.tags, r.field):
            return False
        if r.mode == "emitted":
            return True
        return not (r.on_calls if message.get("tool_calls") else r.on_answers)


Shape = tuple[str, str, str, str]  # call shape, arguments, content next to calls, tool-result role
# What every message needs before any shape can render: a leading system message, content as a list of parts.
FRAMINGS: tuple[tuple[str, ...], ...] = ((), ("system_prompt",), ("content_parts",), ("system_prompt", "content_parts"))


def _probe_episode(shape: Shape, framing: tuple[str, ...] = (), named_ids: bool = False) -> list[Message]:
    calls, arguments, content, tool_role = shape
    call: Message = {
        "id": "call00001",
        "type": "function",
        "function": {"name": SHAPE_PROBE_TOOL, "arguments": dict(SHAPE_PROBE_ARGS)},
    }
    messages: list[Message] = [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": None if content == "none" else "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call00001", "name": SHAPE_PROBE_TOOL, "content": SHAPE_PROBE_RESULT},
        {"role": "assistant", "content": "It is sunny."},
    ]
    if arguments == "string":
        messages = arguments_string(messages)
    if calls == "flat":
        messages = flat_calls(messages)
    if named_ids:
        messages = named_call_ids(messages)
    if tool_role == "user":
        messages = tool_as_user(messages)
    for name in framing:
        messages = FRAMERS[name](messages)
    return messages


def _shows_result(renderer: Renderer, tools: Any, messages: list[Message], full: str) -> bool:
    """The probe's tool result is in the render ``full``, in whatever form the template writes it on every turn
    (``shown_values``: JSON-escaped, in another letter case, a form of its own found by a marker in its place)."""
    if shown(SHAPE_PROBE_RESULT, full):
        return True
    i = next((k for k, m in enumerate(messages) if SHAPE_PROBE_RESULT in str(m.get("content"))), None)
    if i is None:
        return False
    marked = with_text(messages[i], MARKER)

    def render(ms: Sequence[Message]) -> str:
        return renderer.render(list(ms), tools=tools)

    return in_place(render, messages, i, marked, SHAPE_PROBE_RESULT, full)


def _shows_call(renderer: Renderer, tools: Any, messages: list[Message], turn: str, start: int) -> bool:
    """The probe's call is in its turn (``turn`` from ``start``), its name as it is or in a form of the template's
    own (``shown_values``: camelCase, a namespace added, dots for underscores)."""
    completion = turn[start:]
    if shown(SHAPE_PROBE_TOOL, completion):
        return True
    if not messages[-1].get("tool_calls") or not letters_present(SHAPE_PROBE_TOOL, completion):
        return False

    def render(ms: Sequence[Message]) -> str:
        return renderer.render(list(ms), tools=tools)

    return name_in_place(render, messages, 0, turn, start)


def _probe(
    renderer: Renderer, tools: Any, shape: Shape, framing: tuple[str, ...] = (), named_ids: bool = False
) -> Probe:
    messages = _probe_episode(shape, framing, named_ids)
    lead = 2 if "system_prompt" in framing else 1  # messages before the first assistant turn
    try:
        full = renderer.render(messages, tools=tools)
        prompt = renderer.render(messages[:lead], tools=tools, add_generation_prompt=True)
        turn = renderer.render(messages[: lead + 1], tools=tools)
    except RenderError as err:
        return Probe(error=detached(err))
    start = common_prefix_len(prompt, turn)
    completion = turn[start:]
    value = SHAPE_PROBE_ARGS["city"]
    call_id = messages[lead]["tool_calls"][0].get("id") if messages[lead].get("tool_calls") else None
    return Probe(
        shows_call=_shows_call(renderer, tools, messages[: lead + 1], turn, start),
        shows_arguments=value in completion or value in full,
        shows_result=_shows_result(renderer, tools, messages, full),
        shows_id=bool(call_id) and str(call_id) in completion,
    )


def _shapes_in_order() -> list[Shape]:
    """Every shape, those closest to the canonical one first."""
    choices = (("nested", "flat"), ("dict", "string"), ("none", "empty"), ("tool", "user"))
    shapes = list(itertools.product(*choices))
    return sorted(shapes, key=lambda s: sum(a != b for a, b in zip(s, CANONICAL, strict=True)))


def probe_shapes(renderer: Renderer, tools: Any, modes: Sequence[dict[str, Any]] = ()) -> Shapes:
    """What the template accepts, found by rendering one tool episode in each shape until one shows everything.

    Call shape and argument type are conventions a template reads: a shape that shows the call where the
    canonical one does not is adopted. The tool role and content None are the canonical form itself: when the
    canonical role and content render without error, whatever they drop stands (the model cannot see its own
    tool traffic); they are adapted only when the template rejects them. When no shape renders at all, the same
    search runs again with each framing (a system prompt first, content as a list of text parts). ``modes``: the
    thinking modes scenarios are played in, under which reasoning is looked for too (``derive_reasoning``).
    """
    first_error: RenderError | None = None
    for framing in FRAMINGS:
        probes: dict[Shape, Probe] = {}

        def get(shape: Shape, framing: tuple[str, ...] = framing, probes: dict[Shape, Probe] = probes) -> Probe:
            if shape not in probes:
                probes[shape] = _probe(renderer, tools, shape, framing)
            return probes[shape]

        order = _shapes_in_order()
        canonical_forms = [s for s in order if s[2:] == CANONICAL[2:]]
        chosen = next((s for s in canonical_forms if get(s).shows_all), None)
        if chosen is None:
            chosen = next((s for s in canonical_forms if get(s).error is None), None)
        if chosen is None:  # the canonical role or content is rejected: adapt them
            rest = [s for s in order if s not in canonical_forms]
            chosen = next((s for s in rest if get(s).shows_all), None)
            chosen = chosen or next((s for s in rest if get(s).error is None), None)
        first_error = first_error or get(CANONICAL).error
        if chosen is not None:
            shapes = _shapes(renderer, tools, chosen, get, framing, modes)
            if "tool_calls" in shapes.drops and get(chosen).shows_id:  # the id where the name would go
                named = _probe(renderer, tools, chosen, framing, named_ids=True)
                if named.shows_call:
                    drops = tuple(d for d in shapes.drops if d != "tool_calls")
                    if not named.shows_arguments:
                        drops = (*drops, "arguments")
                    shapes = replace(shapes, drops=drops, named_ids=True)
            return shapes
    return Shapes(rejects_tools=first_error.message if first_error is not None else "no shape renders")


def _shapes(
    renderer: Renderer,
    tools: Any,
    chosen: Shape,
    get: Callable[[Shape], Probe],
    framing: tuple[str, ...],
    modes: Sequence[dict[str, Any]],
) -> Shapes:
    p = get(chosen)
    shown = (("tool_calls", p.shows_call), ("arguments", p.shows_arguments), ("tool_results", p.shows_result))
    drops = tuple(name for name, ok in shown if not ok)
    if "tool_calls" in drops:
        drops = tuple(d for d in drops if d != "arguments")  # a dropped call drops its arguments with it
    calls, arguments, content, tool_role = chosen
    empty_drops = False
    if content == "none" and not drops:
        empty = get((calls, arguments, "empty", tool_role))
        empty_drops = empty.error is None and not empty.shows_call
    shapes = Shapes(calls, arguments, content, tool_role, drops, None, empty_drops, framing=framing)
    reasoning = derive_reasoning(renderer, tools, lambda ms: shapes.apply(ms)[0], modes)
    return dataclasses.replace(shapes, reasoning=reasoning)
