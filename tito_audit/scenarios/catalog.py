"""The scenario catalog: conversation shapes x content variants, described as data.

Tool-call ids are 9 alphanumerics (the strictest format in common use, Mistral's), so one id style fits
every template. ``build_scenarios`` needs the tokenizer's own control-token text for the injection variant.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from tito_audit.rollout.probes import TOOLS
from tito_audit.scenarios.spec import Message, Scenario, ScenarioSpec

# Text per variant: (user, tool output, final answer, call arguments)
# A log of 160 rows, a warning printed twice in its middle (red team 33: a template that writes a result's lines
# sorted, or each once, rewrote nothing of rows already sorted and unique)
_ROWS = [f"row {i:04d}: temperature={10 + i % 17} humidity={40 + i % 31}%" for i in range(160)]
_LONG = "\n".join([*_ROWS[:50], "WARN sensor 7: retry", *_ROWS[50:110], "WARN sensor 7: retry", *_ROWS[110:]])
VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {
        "user": "What is the weather in Paris?",
        "tool": "Sunny, 21 C.",
        "final": "It is sunny in Paris.",
        "args": {"city": "Paris"},
    },
    "cjk": {
        "user": "東京の天気は？北京呢？",
        "tool": "晴れ、気温21度。",
        "final": "東京は晴れです。",
        "args": {"city": "東京"},
    },
    "emoji": {
        "user": "Weather in Rio? 🌴☀️",
        "tool": "☀️ 30 C 👍",
        "final": "Hot and sunny 🌞!",
        "args": {"city": "Rio 🌴"},
    },
    "rtl": {
        "user": "ما هو الطقس في القاهرة؟ מזג אוויר",
        "tool": "مشمس، 30 درجة",
        "final": "الجو مشمس في القاهرة.",
        "args": {"city": "القاهرة"},
    },
    "whitespace": {
        "user": "  Weather\tin  Oslo?\n\n",
        "tool": "\n  cold\t-5 C  \n\n",
        "final": " Cold.\n\n ",
        "args": {"city": " Oslo "},
    },
    "nested_json": {
        "user": "Find the Q3 report.",
        "tool": '{"hits": [{"id": 1, "title": "Q3"}], "total": 1}',
        "final": "Found one report.",
        "tool_name": "search_docs",
        "args": {"query": "Q3 report", "filters": {"year": [2024, 2025], "meta": {"lang": "en"}}},
    },
    "booleans": {
        "user": "Search archived docs only.",
        "tool": "[]",
        "final": "Nothing archived.",
        "tool_name": "search_docs",
        "args": {
            "query": "budget",
            "filters": {"archived": True, "draft": False, "owner": None, "score": 0.5, "limit": 10},
        },
    },
    "args_string": {
        "user": "Weather in Berlin?",
        "tool": "Rain, 12 C.",
        "final": "It rains in Berlin.",
        "args": '{"city": "Berlin", "unit": "c"}',
    },
    "long_output": {
        "user": "Give me the hourly log.",
        "tool": _LONG,
        "final": "Here is the summary.",
        "args": {"city": "Lyon"},
    },
    # code a coding agent writes: a multi-line string argument with quotes, a backslash, a tab and non-ASCII text
    # (JSON escapes in the arguments a template may fold or unescape in earlier turns)
    "code_args": {
        "user": "Fix the parser in app.py.",
        "tool": "ok: 2 lines written",
        "final": 'Done: `parse` now splits on "\\t".',
        "tool_name": "write_file",
        "args": {"path": "src/app.py", "code": 'def parse(s):\n    return s.split("\\t")  # é 東京 "ok"\n'},
    },
    # an answer of several paragraphs (an earlier answer a template trims past some length)
    "long_answer": {
        "user": "Explain the forecast in detail.",
        "tool": "Sunny, 21 C, wind 10 km/h W.",
        "final": "\n\n".join(
            f"Part {i}: the forecast for Paris says sunny skies, a light wind from the west and 21 C in the "
            "afternoon; the evening stays dry and mild, and the night cools down to 12 C."
            for i in range(8)
        ),
        "args": {"city": "Paris"},
    },
    "special_text": {},  # filled per tokenizer: control-token text inside user and tool content
}

# The reasoning scenarios send (on a tool-call turn, on an answer; inline in content): a divergence whose differing
# text holds a part of one is reasoning that was dropped or moved (``tito_audit.report.finding_class``).
CALL_REASONING = "The user wants the weather, so I call the tool."
ANSWER_REASONING = "The tool answered; summarise."
INLINE_CALL_REASONING = "I should call the tool."
INLINE_ANSWER_REASONING = "Summarise the result."
REASONING_TEXTS = (CALL_REASONING, ANSWER_REASONING, INLINE_CALL_REASONING, INLINE_ANSWER_REASONING)

# Shapes: step names understood by build_messages. Thinking steps carry reasoning.
SHAPES: dict[str, tuple[str, ...]] = {
    "single_call": ("user", "call", "tool", "final"),
    "two_calls": ("user", "call", "tool", "call", "tool", "final"),
    "parallel_calls": ("user", "call2", "tool", "tool", "final"),
    "system_single_call": ("system", "user", "call", "tool", "final"),
    "followup_user": ("user", "call", "tool", "final", "user", "call", "tool", "final"),
    "system_notice": ("user", "call", "tool", "notice", "final"),
    "content_null": ("user", "null_call", "tool", "final"),
    "reasoning": ("user", "think_call", "tool", "think_final"),
    "reasoning_followup": (
        "system",
        "user",
        "think_call",
        "tool",
        "think_final",
        "user",
        "think_call",
        "tool",
        "think_final",
    ),
    "inline_think": ("user", "inline_think_call", "tool", "inline_think_final"),
}

CATALOG: tuple[ScenarioSpec, ...] = (
    *(
        ScenarioSpec(f"{shape}/plain", steps, "plain", f"{shape.replace('_', ' ')}, plain text")
        for shape, steps in SHAPES.items()
    ),
    *(
        ScenarioSpec(f"single_call/{v}", SHAPES["single_call"], v, f"one tool call, {v.replace('_', ' ')} content")
        for v in VARIANTS
        if v != "plain"
    ),
    *(
        ScenarioSpec(f"two_calls/{v}", SHAPES["two_calls"], v, f"two sequential calls, {v.replace('_', ' ')}")
        for v in ("cjk", "emoji", "whitespace", "nested_json", "booleans", "args_string", "special_text")
    ),
    *(
        ScenarioSpec(f"parallel_calls/{v}", SHAPES["parallel_calls"], v, f"parallel calls, {v.replace('_', ' ')}")
        for v in ("nested_json", "args_string", "long_output")
    ),
    *(
        ScenarioSpec(f"followup_user/{v}", SHAPES["followup_user"], v, f"user follow-up, {v.replace('_', ' ')}")
        for v in ("cjk", "whitespace", "special_text", "long_answer", "code_args")
    ),
    *(
        ScenarioSpec(f"reasoning/{v}", SHAPES["reasoning"], v, f"reasoning_content, {v.replace('_', ' ')}")
        for v in ("cjk", "whitespace", "booleans")
    ),
    *(
        ScenarioSpec(f"system_single_call/{v}", SHAPES["system_single_call"], v, f"system prompt, {v}")
        for v in ("emoji", "rtl")
    ),
    ScenarioSpec(
        "content_empty/plain",
        ("user", "empty_call", "tool", "final"),
        "plain",
        "assistant content is an empty string next to tool calls",
    ),
    ScenarioSpec("inline_think/cjk", SHAPES["inline_think"], "cjk", "inline <think> blocks, CJK"),
    ScenarioSpec("system_notice/whitespace", SHAPES["system_notice"], "whitespace", "system notice mid-episode"),
    # Three tool results: a renderer that trims or drops older results from the third on (context management)
    # rewrites the history only here. Not in SHAPES, so not in the quick set (``--renderer`` audits play the full
    # catalogue; the corpus scan's cost stays as it was).
    ScenarioSpec(
        "three_calls/plain", ("user", "call", "tool", "call", "tool", "call", "tool", "final"), "plain", "three calls"
    ),
    ScenarioSpec("parallel3_calls/plain", ("user", "call3", "tool", "tool", "tool", "final"), "plain", "3 parallel"),
    # A long agent episode (seven tool cycles, 16 messages): a template that rewrites history once the conversation
    # grows past some length is seen here without reading its code (``derived_scenarios`` plays past the lengths a
    # template tests). Full set only, like the two above.
    ScenarioSpec(
        "long_episode/plain",
        ("user", *("call", "tool") * 7, "final"),
        "plain",
        "seven sequential tool calls",
    ),
)


def _call_id(n: int) -> str:
    return f"call{n:05d}"[:9].ljust(9, "0")


def _variant(name: str, special_texts: Sequence[str]) -> dict[str, Any]:
    if name != "special_text":
        return VARIANTS[name]
    text = " ".join(special_texts[:4]) or "<|im_end|> </s>"
    return {
        "user": f"Please echo this: {text}",
        "tool": f"result {text} done",
        "final": "Echoed.",
        "args": {"city": "Paris"},
    }


def build_messages(spec: ScenarioSpec, special_texts: Sequence[str]) -> list[Message]:
    """The conversation of ``spec``: its shape's steps (``SHAPES``) written with its variant's texts, each call with
    an id in the catalogue's format and each tool result answering the oldest call not yet answered."""
    v = _variant(spec.variant, special_texts)
    tool_name = v.get("tool_name", "get_weather")
    msgs: list[Message] = []
    pending: list[str] = []
    counter = 0

    def call(args: Any, name: str = tool_name) -> dict[str, Any]:
        nonlocal counter
        counter += 1
        cid = _call_id(counter)
        pending.append(cid)
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}

    turn = 0
    for step in spec.steps:
        turn += 1
        if step == "system":
            msgs.append({"role": "system", "content": "You are a careful assistant. Use tools when useful."})
        elif step == "user":
            msgs.append({"role": "user", "content": v["user"] if turn < 3 else f"And tomorrow? {v['user']}"})
        elif step == "notice":
            msgs.append({"role": "system", "content": "Notice: the tool quota is almost used up."})
        elif step in ("call", "empty_call", "null_call", "think_call", "inline_think_call"):
            m: Message = {"role": "assistant", "content": "", "tool_calls": [call(v["args"])]}
            if step == "null_call":
                m["content"] = None
            if step == "think_call":
                m["reasoning_content"] = CALL_REASONING
            if step == "inline_think_call":
                m["content"] = f"<think>\n{INLINE_CALL_REASONING}\n</think>\n\n"
            msgs.append(m)
        elif step == "call2":
            other = dict(v["args"]) if isinstance(v["args"], dict) else v["args"]
            msgs.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [call(v["args"]), call(other, "search_docs")],
                }
            )
        elif step == "call3":  # three parallel calls
            calls = [call(v["args"]), call(v["args"], "search_docs"), call(v["args"])]
            msgs.append({"role": "assistant", "content": "", "tool_calls": calls})
        elif step == "tool":
            cid = pending.pop(0) if pending else _call_id(0)
            msgs.append({"role": "tool", "tool_call_id": cid, "name": tool_name, "content": v["tool"]})
        elif step == "final":
            msgs.append({"role": "assistant", "content": v["final"]})
        elif step == "think_final":
            msgs.append(
                {
                    "role": "assistant",
                    "content": v["final"],
                    "reasoning_content": ANSWER_REASONING,
                }
            )
        elif step == "inline_think_final":
            msgs.append(
                {"role": "assistant", "content": f"<think>\n{INLINE_ANSWER_REASONING}\n</think>\n\n{v['final']}"}
            )
        else:
            raise ValueError(f"unknown step {step!r} in scenario {spec.id}")
    return msgs


def _tags(spec: ScenarioSpec, messages: Iterable[Message]) -> frozenset[str]:
    tags = {spec.variant, spec.id.split("/")[0]}
    for m in messages:
        if m.get("reasoning_content") or "<think>" in str(m.get("content") or ""):
            tags.add("thinking")
        if m.get("tool_calls"):
            tags.add("tool")
            if len(m["tool_calls"]) > 1:
                tags.add("parallel")
        if m["role"] == "system":
            tags.add("system")
    return frozenset(tags | set(spec.tags))


_SCALARS = (bool, int, float, str, type(None))  # mode values a memo key holds with their type


def build_scenarios(
    special_texts: Sequence[str] = (),
    thinking_modes: Sequence[dict[str, Any]] = ({},),
    only: Sequence[str] | None = None,
) -> list[Scenario]:
    """Concrete scenarios; scenarios with reasoning are played once per thinking mode.

    Only the first four special texts are read (the injection variant writes them), so every template of a
    tokenizer that puts the same four first gets the same scenarios: they are built once per such input
    (scenarios are frozen, and their messages are read, never changed: ``Scenario.messages_list`` copies)."""
    if not all(type(v) in _SCALARS for mode in thinking_modes for v in mode.values()):
        return _build_all(special_texts[:4], thinking_modes, only)  # values a memo key could confuse
    # each value with its type: True, 1 and 1.0 are equal keys, but not the same scenario
    modes = tuple(tuple((k, type(v).__name__, v) for k, v in sorted(mode.items())) for mode in thinking_modes)
    return list(_built(tuple(special_texts[:4]), modes, None if only is None else tuple(only)))


@lru_cache(maxsize=256)
def _built(
    special_texts: tuple[str, ...], modes: tuple[tuple[tuple[str, str, Any], ...], ...], only: tuple[str, ...] | None
) -> tuple[Scenario, ...]:
    return tuple(_build_all(special_texts, [{k: v for k, _, v in mode} for mode in modes], only))


def _build_all(
    special_texts: Sequence[str], thinking_modes: Sequence[dict[str, Any]], only: Sequence[str] | None
) -> list[Scenario]:
    out: list[Scenario] = []
    for spec in CATALOG:
        if only and not any(spec.id.startswith(o) for o in only):
            continue
        out += in_modes(spec, build_messages(spec, special_texts), thinking_modes)
    return out


def in_modes(spec: ScenarioSpec, messages: list[Message], thinking_modes: Sequence[dict[str, Any]]) -> list[Scenario]:
    """The scenario of ``spec`` with ``messages``, once per thinking mode when it carries reasoning."""
    tags = _tags(spec, messages)
    modes = thinking_modes if "thinking" in tags else ({},)
    out = []
    for mode in modes:
        suffix = "".join(f"[{k}={json.dumps(val)}]" for k, val in sorted(mode.items()))
        out.append(
            Scenario(
                id=spec.id + suffix,
                description=spec.description,
                messages=tuple(messages),
                tools=TOOLS,
                tags=tags,
                template_kwargs=tuple(sorted(mode.items())),
            )
        )
    return out


# ``--scenarios quick``: every conversation shape once with plain text, plus the variants that specific checks
# read (control-token text, JSON booleans, multi-byte text, whitespace) and string arguments (which some
# templates require). Every check still runs; fewer content variants means fewer chances to catch a break, so a
# quick verdict can be milder than the full one.
QUICK_SCENARIOS: tuple[str, ...] = (
    "single_call/plain",
    "two_calls/plain",
    "parallel_calls/plain",
    "system_single_call/plain",
    "followup_user/plain",
    "system_notice/plain",
    "content_null/plain",
    "reasoning/plain",
    "reasoning_followup/plain",
    "inline_think/plain",
    "single_call/special_text",
    "single_call/booleans",
    "single_call/whitespace",
    "two_calls/cjk",
    "single_call/args_string",
    "two_calls/args_string",
)
SCENARIO_SETS: dict[str, tuple[str, ...] | None] = {"full": None, "quick": QUICK_SCENARIOS}
