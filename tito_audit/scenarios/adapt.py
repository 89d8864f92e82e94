"""Adapt a conversation to what a template accepts, instead of giving up on the model: the named rewrites.

Tool declarations first: a template that rejects the OpenAI schema (``{"type": "function", "function": {name,
description, parameters}}``) for every conversation is rendered with the first of ``TOOL_SCHEMAS`` it accepts
(every parameter described, flat ``{name, description, parameters}``, ``{name, description,
parameter_definitions}``), the renderer converting the declarations on every render (``tools_as_read``). Then two
layers. ``scenarios.shapes`` finds, by rendering one small tool episode in each shape, what the template
accepts (nested or flat calls, dict or JSON-string arguments, content None or ``""`` next to calls, the ``tool``
role or results as user turns, how reasoning reaches the render) and plays every scenario in that shape with
the rewrites here. Then, per scenario, the fallbacks in ``ADAPTERS`` (a ``system`` role merged into the user
turn, tool results as user turns) are tried only after the template has refused the conversation. Each
adaptation used is recorded with the result: the user's rollout code must make it too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Renderer
from tito_audit.scenarios.spec import Message


def tool_as_user(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    for m in messages:
        if m["role"] == "tool":
            text = content_text(m) or ""  # a result's text parts joined: the user message it joins is text
            if out and out[-1]["role"] == "user" and out[-1].get("_from_tool"):
                out[-1] = {**out[-1], "content": out[-1]["content"] + "\n" + text}
            else:
                out.append({"role": "user", "content": text, "_from_tool": True})
        else:
            out.append(m)
    return [{k: v for k, v in m.items() if k != "_from_tool"} for m in out]


def _system_into_user(messages: list[Message]) -> list[Message]:
    if not messages or messages[0]["role"] != "system":
        return messages
    system, rest = messages[0], messages[1:]
    for i, m in enumerate(rest):
        if m["role"] == "user":
            prompt = content_text(system) or ""
            content = m.get("content")
            if isinstance(content, list):  # content parts: the system prompt as a text part before them
                merged = {**m, "content": [{"type": "text", "text": prompt}, *content]}
            else:
                merged = {**m, "content": f"{prompt}\n\n{content or ''}"}
            return [*rest[:i], merged, *rest[i + 1 :]]
    return rest


def _calls_as_content(messages: list[Message]) -> list[Message]:
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [call_function(c) for c in m["tool_calls"]]
            text = "\n".join(json.dumps({"name": c["name"], "arguments": c["arguments"]}) for c in calls)
            content = m.get("content")
            if isinstance(content, list):  # content parts: the calls as one more text part
                m = {"role": "assistant", "content": [*content, {"type": "text", "text": text}]}
            else:
                m = {"role": "assistant", "content": (content or "") + text}
        out.append(m)
    return out


def _system_prompt(messages: list[Message]) -> list[Message]:
    """A system message first, for templates that read ``messages[0]`` as the system prompt unconditionally."""
    if messages and messages[0]["role"] == "system":
        return messages
    return [{"role": "system", "content": "You are a helpful assistant."}, *messages]


def _content_parts(messages: list[Message]) -> list[Message]:
    """Content as a list of text parts (multimodal templates iterate ``message.content``)."""
    return [
        {**m, "content": [{"type": "text", "text": m["content"]}]} if isinstance(m.get("content"), str) else m
        for m in messages
    ]


FRAMERS: dict[str, Callable[[list[Message]], list[Message]]] = {
    "system_prompt": _system_prompt,
    "content_parts": _content_parts,
}


ADAPTERS: dict[str, Callable[[list[Message]], list[Message]]] = {
    "system_into_user": _system_into_user,
    "tool_as_user": tool_as_user,
    "calls_as_content": _calls_as_content,
}


def adapt_messages(messages: list[Message], names: tuple[str, ...]) -> list[Message]:
    for name in names:
        messages = ADAPTERS[name](messages)
    return messages


def content_text(message: Message) -> str | None:
    """A message's content as text (the text parts joined when it is a list of parts); None when absent."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if content is None else str(content)


def call_function(call: Message) -> Message:
    """The name/arguments part of a tool call in either shape (nested ``function`` or flat)."""
    fn = call.get("function")
    return fn if isinstance(fn, dict) else call


def with_arguments(call: Message, arguments: Any) -> Message:
    """The same call with other arguments, in the shape it has."""
    if isinstance(call.get("function"), dict):
        return {**call, "function": {**call["function"], "arguments": arguments}}
    out = {**call, "arguments": arguments}
    if "parameters" in call:
        out["parameters"] = arguments
    return out


def reasoning_of(
    message: Message, tags: tuple[str, str] = ("<think>", "</think>"), field: str = "reasoning_content"
) -> str:
    """The reasoning an assistant message carries (in ``field``, or inline between ``tags``)."""
    if message.get("role") != "assistant":
        return ""
    if message.get(field):
        return str(message[field])
    content = content_text(message) or ""
    if tags[0] in content and tags[1] in content:
        return content.split(tags[0], 1)[1].split(tags[1], 1)[0].strip()
    return ""


def _map_calls(messages: list[Message], fn: Callable[[Message], Message]) -> list[Message]:
    out = []
    for m in messages:
        if m.get("tool_calls"):
            m = {**m, "tool_calls": [fn(c) for c in m["tool_calls"]]}
        out.append(m)
    return out


def arguments_string(messages: list[Message]) -> list[Message]:
    def one(call: Message) -> Message:
        args = call_function(call).get("arguments")
        return call if isinstance(args, str) else with_arguments(call, json.dumps(args, ensure_ascii=False))

    return _map_calls(messages, one)


def flat_calls(messages: list[Message]) -> list[Message]:
    def one(call: Message) -> Message:
        fn = call_function(call)
        flat = {k: v for k, v in call.items() if k != "function"}
        return {**flat, "name": fn.get("name"), "arguments": fn.get("arguments"), "parameters": fn.get("arguments")}

    return _map_calls(messages, one)


def named_call_ids(messages: list[Message]) -> list[Message]:
    """Tool-call ids that carry the function name, ``functions.NAME:INDEX`` (the index counts the conversation's
    calls), and each result's ``tool_call_id`` to match: for a template that writes a call's id where the call's
    name would go (Kimi-K2.5), so that the engine's parser reads the name from the id."""
    renamed: dict[Any, str] = {}
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                new = f"functions.{call_function(call).get('name')}:{len(renamed)}"
                renamed[call.get("id")] = new
                calls.append({**call, "id": new})
            m = {**m, "tool_calls": calls}
        elif m.get("role") == "tool" and m.get("tool_call_id") in renamed:
            m = {**m, "tool_call_id": renamed[m["tool_call_id"]]}
        out.append(m)
    return out


def call_content(messages: list[Message], old: Any, new: Any) -> list[Message]:
    return [
        {**m, "content": new} if m.get("tool_calls") and "content" in m and m["content"] == old else m for m in messages
    ]


def reasoning_inline(messages: list[Message], tags: tuple[str, str]) -> list[Message]:
    """``reasoning_content`` moved into the content, between the template's delimiters (an empty one included)."""
    out = []
    for m in messages:
        if m.get("role") == "assistant" and isinstance(m.get("reasoning_content"), str):
            thought = m["reasoning_content"]
            m = {k: v for k, v in m.items() if k != "reasoning_content"}
            m["content"] = f"{tags[0]}\n{thought}\n{tags[1]}\n\n{m.get('content') or ''}"
        out.append(m)
    return out


def _function(tool: Any) -> dict[str, Any] | None:
    """The name/description/parameters of an OpenAI-shaped declaration, None for any other shape."""
    fn = tool.get("function") if isinstance(tool, dict) else None
    return fn if isinstance(fn, dict) else None


def _described_parameters(parameters: Any) -> Any:
    """A JSON schema whose every top-level property has a description (some templates print each one)."""
    if not isinstance(parameters, dict) or not isinstance(parameters.get("properties"), dict):
        return parameters
    props = {
        name: {"description": f"The {name}.", **spec} if isinstance(spec, dict) else spec
        for name, spec in parameters["properties"].items()
    }
    return {**parameters, "properties": props}


def _described(tools: list[Any]) -> list[Any]:
    out = []
    for tool in tools:
        fn = _function(tool)
        if fn is not None:
            tool = {**tool, "function": {**fn, "parameters": _described_parameters(fn.get("parameters"))}}
        out.append(tool)
    return out


def _flat(tools: list[Any]) -> list[Any]:
    out = []
    for tool in _described(tools):
        fn = _function(tool)
        out.append({"type": "function", **fn} if fn is not None else tool)
    return out


def _parameter_definitions(tools: list[Any]) -> list[Any]:
    out = []
    for tool in _described(tools):
        fn = _function(tool)
        if fn is not None:
            params = fn.get("parameters") or {}
            required = set(params.get("required") or [])
            tool = {
                "name": fn.get("name"),
                "description": fn.get("description", ""),
                "parameter_definitions": {
                    name: {
                        "description": spec.get("description", ""),
                        "type": spec.get("type", "string"),
                        "required": name in required,
                    }
                    for name, spec in (params.get("properties") or {}).items()
                    if isinstance(spec, dict)
                },
            }
        out.append(tool)
    return out


# Tool-declaration schemas besides OpenAI's, in the order they are tried; each conversion leaves a declaration
# already in its schema as it is (a renderer may convert twice).
TOOL_SCHEMAS: dict[str, Callable[[list[Any]], list[Any]]] = {
    "tools_described": _described,
    "tools_flat": _flat,
    "tools_parameter_definitions": _parameter_definitions,
}
# The shape probe's first prompt (``scenarios.shapes``), so that the render is the one it makes anyway.
_PROBE_USER: list[Message] = [{"role": "user", "content": "What is the weather?"}]


def tools_as_read(renderer: Renderer, tools: list[Any]) -> Renderer:
    """``renderer``, or, for a template that rejects ``tools`` in the OpenAI schema, the renderer that converts them
    to the first schema of ``TOOL_SCHEMAS`` it renders (its name is the adaptation the rollout code must make)."""
    try:
        renderer.render(_PROBE_USER, tools=tools, add_generation_prompt=True)
        return renderer
    except RenderError as err:
        if err.kind in ("timeout", "too_large", "security"):
            return renderer
    for name, convert in TOOL_SCHEMAS.items():
        candidate = renderer.with_tools_as((name, convert))
        try:
            candidate.render(_PROBE_USER, tools=tools, add_generation_prompt=True)
        except RenderError:
            continue
        return candidate
    return renderer


def reasoning_field(messages: list[Message], field: str) -> list[Message]:
    """``reasoning_content`` under the key the template reads reasoning from."""
    return [
        {(field if k == "reasoning_content" else k): v for k, v in m.items()} if "reasoning_content" in m else m
        for m in messages
    ]


def retag_inline(messages: list[Message], tags: tuple[str, str]) -> list[Message]:
    """Inline ``<think>`` blocks in assistant content written with the template's own delimiters."""
    out = []
    for m in messages:
        content = m.get("content")
        if m.get("role") == "assistant" and isinstance(content, str) and "</think>" in content:
            m = {**m, "content": content.replace("<think>", tags[0]).replace("</think>", tags[1])}
        out.append(m)
    return out
