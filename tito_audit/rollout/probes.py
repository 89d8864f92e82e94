"""Probe conversations and tool declarations: the fixed data that checks, ``Trajectory.preflight``, stop
detection and ``tito-audit fix`` render a template with.

Data only, importing nothing from the package, so that both the public rollout library and the audit (checks,
fix) can read it without one importing the other. Tool-call ids are 9 alphanumerics (the strictest format in
common use, Mistral's), so strict templates accept every probe.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]

# Text no template writes by itself: rendered into a probe, it marks where the payload ends and the template's
# own text begins (stop detection, ``fix``'s generation markers).
MARKER = "Zq7MARK"

# The scenarios' tool declarations (full ones: some templates, gpt-oss's, need a description).
TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search internal documents.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "filters": {"type": "object"}},
                "required": ["query"],
            },
        },
    },
)

WEATHER_CALL: list[Message] = [
    {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
]

# ``append_matrix``: an assistant turn to append after, and one message of each role to append.
APPEND_BASES: dict[str, list[Message]] = {
    "after_answer": [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi, how can I help?", "reasoning_content": "Greet back."},
    ],
    "after_call": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": WEATHER_CALL, "reasoning_content": "Call the tool."},
    ],
}
APPENDS: dict[str, list[Message]] = {
    "tool": [{"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "cold"}],
    "user": [{"role": "user", "content": "Thanks. And tomorrow?"}],
    "system": [{"role": "system", "content": "Notice: be brief."}],
    "assistant": [{"role": "assistant", "content": "Let me add something."}],
}

# ``tool_append_prefix``: the smallest episode that has the property, one user turn, one call, one result (as TRL
# probes it).
MINIMAL_TOOL_CALL: list[Message] = [
    {"id": "call00001", "type": "function", "function": {"name": "dummy", "arguments": {}}}
]
MINIMAL_TOOL_EPISODE: list[Message] = [
    {"role": "user", "content": "dummy"},
    {"role": "assistant", "content": "", "tool_calls": MINIMAL_TOOL_CALL},
]
MINIMAL_TOOL_RESULT: list[Message] = [
    {"role": "tool", "tool_call_id": "call00001", "name": "dummy", "content": "dummy"}
]

# ``scenarios.shapes``: one tool episode rendered in each conversation shape. Values no template writes by itself,
# so that finding them in a render means the message was rendered.
SHAPE_PROBE_TOOL = "get_weather"
SHAPE_PROBE_ARGS: dict[str, Any] = {"city": "Quixotic"}
SHAPE_PROBE_RESULT = "Sunny, 21 C (probe 4417)."
SHAPE_PROBE_REASONING = "Probe reasoning 5521."

# Stop detection: an answer and a call whose payload ends with ``MARKER``; the template's turn end follows it.
TURN_END_PROBES: tuple[list[Message], ...] = (
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": f"Answer {MARKER}"}],
    [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call00001",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": MARKER}},
                }
            ],
        },
    ],
)

# ``fix``'s reasoning patch: assistant turns as the last message, and what an agent loop appends after each.
REASONING_PROBES: tuple[tuple[list[Message], tuple[list[Message], ...]], ...] = tuple(
    (
        [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", **turn}],
        (
            *(
                ([{"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "cold"}],)
                if "tool_calls" in turn
                else ()
            ),
            [{"role": "user", "content": "And tomorrow?"}],
        ),
    )
    for turn in (
        {"content": "It is cold.", "reasoning_content": "Answer."},
        {"content": "It is cold."},
        {"content": "", "tool_calls": WEATHER_CALL, "reasoning_content": "Call the tool."},
        {"content": "", "tool_calls": WEATHER_CALL},
    )
)

# ``fix``'s proof: a conversation without tool calls, which every template renders whatever it does with tools.
CHAT: tuple[Message, ...] = (
    {"role": "user", "content": "Hello, who are you?"},
    {"role": "assistant", "content": "I am a helpful assistant."},
    {"role": "user", "content": "What can you do?"},
    {"role": "assistant", "content": "I can answer questions."},
)
