"""What ``apply_chat_template(..., tokenize=False)`` hands a compiled template, with each message prepared once.

Before every render, transformers rebuilds each input out of plain JSON types (``_normalize_chat_messages``,
``_plain_template_data``, ``_alias_reasoning_fields``): recursive walks in Python over every message and tool
schema, about a tenth of the instructions of a corpus scan's audits. An audit renders each message again with
every longer prefix, and a scan renders the same scenario messages for every template. Each of those steps maps a
conversation message by message, so here each message (at its position: two equal messages of one conversation
stay two objects, as transformers gives them) and each tool list is prepared once, by those same functions, and
the compiled template (transformers' cached compile, in its sandbox) is rendered with the arguments
``render_jinja_template`` passes it.

A prepared message can be shared between renders because no template can change it: transformers renders in
jinja's ``ImmutableSandboxedEnvironment``, which refuses every method that modifies a list or a dict.

That this gives a template exactly what ``apply_chat_template`` gives it is checked, not assumed: once per
tokenizer class, the arguments transformers itself passes to a probe template are captured and compared with
these (``_matches_transformers``). Whatever that check does not cover goes to ``apply_chat_template`` itself: a
tokenizer class with an ``apply_chat_template`` of its own, a template kwarg that transformers would read as one of
its own arguments, a message or tool that is not a dict, an empty conversation, or a transformers without these
pieces (``compat``'s ``fast_inputs``). ``tests/rendering/test_template_inputs.py`` holds the renders of a fourth of the
corpus to apply_chat_template's.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Sequence
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from tito_audit import compat
from tito_audit.rendering.bounded_cache import BoundedCache

Message = dict[str, Any]

# The probe: every kind of value the preparation treats apart (None-valued keys, each reasoning field name, nested
# tool calls, content parts, tuples, numbers, booleans), tools, and template kwargs beside the special tokens.
_PROBE_TEMPLATE = "{# tito-audit: the arguments transformers renders a template with #}{{ messages | length }}"
_PROBE_CALL = {"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [True, None, 2.5]}}}
_PROBE_MESSAGES: list[Message] = [
    {"role": "system", "content": "s", "name": None},
    {"role": "user", "content": [{"type": "text", "text": "t"}], "extra": (1, 2.0, False)},
    {"role": "assistant", "content": None, "reasoning_content": "r", "tool_calls": [_PROBE_CALL]},
    {"role": "tool", "content": "c", "tool_call_id": "0"},
    {"role": "assistant", "content": "x", "thinking": "t"},
    {"role": "assistant", "content": "y", "reasoning": "u"},
    {"role": "user", "content": "s"},
    {"role": "user", "content": "s"},
]
_PROBE_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["a"]}}}]
_PROBE_KWARGS = {"enable_thinking": False, "custom": {"k": [1, None, ("x",)]}}

_VERIFIED: dict[type, bool] = {}
_PREPARED = BoundedCache(16384)  # content key of (position, message) -> the prepared message (-1: the tool list)
_LOCK = threading.Lock()  # the memo and the probe are one per process, shared by every thread's renders


def render_text(
    tokenizer: Any,
    chat_template: str,
    messages: Sequence[Message],
    tools: list[Any] | None,
    add_generation_prompt: bool,
    kwargs: dict[str, Any],
) -> str:
    """``tokenizer.apply_chat_template(messages, tools=tools, chat_template=chat_template,
    add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs)``, with each input prepared once."""
    if not covered(tokenizer, messages, tools, kwargs):
        return tokenizer.apply_chat_template(
            list(messages),
            tools=tools,
            chat_template=chat_template,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **kwargs,
        )
    compiled = compat.compile_cache().compile(tokenizer.get_chat_template(chat_template, tools))
    return compiled.render(**_arguments(tokenizer, messages, tools, add_generation_prompt, kwargs, memo=True))


def render_compiled(
    compiled: Any,
    tokenizer: Any,
    messages: Sequence[Message],
    tools: list[Any] | None,
    add_generation_prompt: bool,
    kwargs: dict[str, Any],
    extra: dict[str, Any],
) -> str:
    """``compiled`` (a jinja template compiled in the chat template's own environment: coverage's instrumented
    copy) rendered with the arguments ``render_text`` gives the chat template, and ``extra``."""
    args = _arguments(tokenizer, messages, tools, add_generation_prompt, kwargs, memo=True)
    return str(compiled.render(**args, **extra))


def _utils() -> Any:
    """transformers' input preparation (``compat``'s ``fast_inputs``: probed once, on first use; importing this
    module imports no transformers). Where that piece is unavailable (its fallback), transformers 5.23's own
    preparation: plain JSON data, each message without its None-valued keys. Only ``render_compiled`` gets here
    then (every other render goes through ``apply_chat_template``): coverage's instrumented copy, which only
    records which arms the template takes."""
    pieces = compat.pieces("fast_inputs")
    if pieces is None:
        return SimpleNamespace(
            plain=_plain_json, alias=lambda conversation: conversation, normalize=compat._drop_none_keys
        )
    return pieces


def _plain_json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _arguments(
    tokenizer: Any, messages: Sequence[Message], tools: Any, agp: bool, kwargs: dict[str, Any], memo: bool
) -> dict[str, Any]:
    """The keyword arguments ``render_jinja_template`` renders the compiled template with, in its order."""
    prepare = _memoized if memo else _prepared
    chat = [prepare(i, m) for i, m in enumerate(messages)]
    tool_schemas = None if tools is None else prepare(-1, tools)
    extra = _utils().plain({**tokenizer.special_tokens_map, **kwargs})
    return dict(messages=chat, tools=tool_schemas, documents=None, add_generation_prompt=agp, **extra)


def _prepared(position: int, value: Any) -> Any:
    """One message as transformers prepares it inside a conversation (position -1: the tool list)."""
    prepare = _utils()
    if position < 0:
        return prepare.plain(value)
    normalized = prepare.normalize([value])
    return prepare.alias(prepare.plain(normalized))[0]


def _memoized(position: int, value: Any) -> Any:
    """``_prepared``, kept by position and content (prepared every time for a value that is not plain data)."""
    with _LOCK:
        return _PREPARED.by_content((position, value), _prepared_at)


def _prepared_at(at: tuple[int, Any]) -> Any:
    return _prepared(*at)


def covered(tokenizer: Any, messages: Sequence[Message], tools: Any, kwargs: dict[str, Any]) -> bool:
    """Whether this call is one the check covers (see the module's docstring): ``render_text`` renders the compiled
    template itself, as ``render_compiled`` renders a copy of it."""
    if not messages or not all(isinstance(m, dict) for m in messages):
        return False
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return False
    if kwargs and not _reserved().isdisjoint(kwargs):
        return False
    if _utils() is None:
        return False
    verified = _VERIFIED.get(type(tokenizer))
    if verified is None:
        with _LOCK:  # one probe at a time: each swaps the one compiled probe template's render
            verified = _VERIFIED[type(tokenizer)] = _matches_transformers(tokenizer)
    return verified


@lru_cache(maxsize=1)
def _reserved() -> frozenset[str]:
    """Names transformers reads as arguments of its own rather than passing to the template (asked on first use:
    importing this module imports no transformers)."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase
        from transformers.utils.chat_template_utils import render_jinja_template
    except ImportError:
        return frozenset()
    names = set(inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters)
    names |= set(inspect.signature(render_jinja_template).parameters)
    return frozenset(names | {"messages", "tools", "documents", "add_generation_prompt", "self"})


def _matches_transformers(tokenizer: Any) -> bool:
    """Whether, for the probe, ``tokenizer.apply_chat_template`` renders the template with exactly the arguments
    ``_arguments`` builds: the same values, types and key order, and one render call. The probe template's
    ``render`` is replaced on that one compiled object, for that one call, to capture them."""
    try:
        from transformers.tokenization_utils_base import PreTrainedTokenizerBase

        if type(tokenizer).apply_chat_template is not PreTrainedTokenizerBase.apply_chat_template:
            return False
        compiled = compat.compile_cache().compile(_PROBE_TEMPLATE)
        seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

        def capture(*args: Any, **kw: Any) -> str:
            seen.append((args, kw))
            return ""

        compiled.render = capture
        try:
            tokenizer.apply_chat_template(
                _PROBE_MESSAGES,
                tools=_PROBE_TOOLS,
                chat_template=_PROBE_TEMPLATE,
                add_generation_prompt=True,
                tokenize=False,
                **_PROBE_KWARGS,
            )
        finally:
            del compiled.render
        ours = _arguments(tokenizer, _PROBE_MESSAGES, _PROBE_TOOLS, True, _PROBE_KWARGS, memo=False)
        return len(seen) == 1 and seen[0][0] == () and _same(seen[0][1], ours)
    except Exception:  # a transformers without these pieces, or one that renders another way
        return False


def _same(a: Any, b: Any) -> bool:
    """Equal values of identical types at every level, dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)
