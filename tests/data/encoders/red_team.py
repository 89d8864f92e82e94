"""Python encoders for ``--renderer``/``--train-renderer`` tests (``tests/engines/test_engine_renders.py``), from
the red team's reproducers: each renders with Qwen2.5's own chat template (the bundled model's tokenizer, through
transformers' ``apply_chat_template``), then breaks it in one way that an audit must catch."""

from __future__ import annotations

import copy
import datetime
import json
from functools import cache
from typing import Any


@cache
def _model() -> Any:
    from tito_audit import load

    return load("qwen2.5-7b-instruct")


def _render(messages, tools=None, add_generation_prompt=False, **kwargs):
    return _model().tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs
    )


def good(messages, tools=None, add_generation_prompt=False):
    """The template itself, as text (an engine that encodes it plainly)."""
    return _render(messages, tools, add_generation_prompt)


def good_ids(messages, tools=None, add_generation_prompt=False):
    """The template, returned as token ids encoded plainly (as a wrapper returning ids would)."""
    return _model().tokenizer.encode(_render(messages, tools, add_generation_prompt), add_special_tokens=False)


def escaping(messages, tools=None, add_generation_prompt=False):
    """Defangs control-token text found in message content ('<|im_end|>' written '<｜im_end｜>')."""

    def clean(content):
        return content.replace("<|", "<｜").replace("|>", "｜>") if isinstance(content, str) else content

    return _render([dict(m, content=clean(m.get("content"))) for m in messages], tools, add_generation_prompt)


def today(messages, tools=None, add_generation_prompt=False):
    """Writes the wall clock's date in a system line (it is not given the date)."""
    date = datetime.date.today().strftime("%d %b %Y")
    return f"<|im_start|>system\nToday Date: {date}<|im_end|>\n" + _render(messages, tools, add_generation_prompt)


def dated(messages, tools=None, add_generation_prompt=False, date=None):
    """Writes the date it is given."""
    header = f"<|im_start|>system\nToday Date: {date:%d %b %Y}<|im_end|>\n"
    return header + _render(messages, tools, add_generation_prompt)


def _no_descriptions(tool):
    fn = tool.get("function", tool)
    fn.pop("description", None)
    for p in (fn.get("parameters") or {}).get("properties", {}).values():
        p.pop("description", None)
    return tool


def strip_tool_docs_inplace(messages, tools=None, add_generation_prompt=False):
    """Renders the tools without their descriptions, by editing the tool dicts it was given."""
    for t in tools or []:
        _no_descriptions(t)
    return _render(messages, tools, add_generation_prompt)


def strip_tool_docs_copy(messages, tools=None, add_generation_prompt=False):
    """The same renderer, on a copy of the tools."""
    return _render(messages, [_no_descriptions(copy.deepcopy(t)) for t in tools or []] or None, add_generation_prompt)


def args_string_inplace(messages, tools=None, add_generation_prompt=False):
    """Writes tool-call arguments as a compact JSON string, converting them in the messages it was given."""
    for m in messages:
        for c in m.get("tool_calls") or []:
            fn = c.get("function", c)
            if isinstance(fn.get("arguments"), dict):
                fn["arguments"] = json.dumps(fn["arguments"], separators=(",", ":"))
    return _render(messages, tools, add_generation_prompt)


def escaping_trainer(messages, tools=None, add_generation_prompt=False):
    """A trainer that defangs control-token text in content (as some trainers' sanitizers do)."""
    return escaping(messages, tools, add_generation_prompt)


def refuse_tools(messages, tools=None, add_generation_prompt=False):
    """Refuses any conversation with tool traffic (every scenario has some)."""
    if any(m["role"] == "tool" or m.get("tool_calls") for m in messages):
        raise ValueError("tool traffic not supported")
    return _render(messages, tools, add_generation_prompt)


def refuse_all(messages, tools=None, add_generation_prompt=False):
    raise ValueError("this encoder renders nothing")


def thinking_kwargs(messages, tools=None, add_generation_prompt=False, **kwargs):
    """Takes options through **kwargs. With enable_thinking on it opens <think> in the generation prompt and drops the
    earlier assistant turns' content from the history."""
    if kwargs.get("enable_thinking"):
        last = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
        messages = [dict(m, content="") if m["role"] == "assistant" and i < last else m for i, m in enumerate(messages)]
        return _render(messages, tools, add_generation_prompt) + ("<think>\n" if add_generation_prompt else "")
    return _render(messages, tools, add_generation_prompt)


def ds_style(messages, tools=None, add_generation_prompt=False, thinking_mode="chat"):
    """Shaped like the DeepSeek V3.2 wrapper of docs/renderers.md: thinking_mode is "chat" or "thinking" (anything else
    refused). In thinking mode the generation prompt opens <think> and earlier assistant turns lose their content."""
    if thinking_mode not in ("chat", "thinking"):
        raise ValueError(f"thinking_mode must be 'chat' or 'thinking', not {thinking_mode!r}")
    return thinking_kwargs(messages, tools, add_generation_prompt, enable_thinking=thinking_mode == "thinking")


def thinking_bool(messages, tools=None, add_generation_prompt=False, thinking=False):
    """A boolean switch named `thinking` (DeepSeek V3.1's template, Kimi K2.5)."""
    return thinking_kwargs(messages, tools, add_generation_prompt, enable_thinking=thinking)


def trim_old_tool_results(messages, tools=None, add_generation_prompt=False):
    """Context management: only the last 2 tool results keep their content; older ones become '[trimmed]'."""
    idx = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    old = set(idx[:-2])
    return _render(
        [dict(m, content="[trimmed]") if i in old else m for i, m in enumerate(messages)], tools, add_generation_prompt
    )
