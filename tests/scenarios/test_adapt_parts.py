"""The fallback adapters on content given as lists of text parts (what the search draws where a template renders
them): a tool result's parts join the user message it becomes as text, and a system prompt moved into a user turn
of parts goes first as a part of its own. Before, the first raised a TypeError inside the audit (the search then
failed, a caveat instead of a verdict) and the second wrote the list's Python repr into the conversation."""

from __future__ import annotations

from tito_audit.scenarios.adapt import ADAPTERS

PARTS = [{"type": "text", "text": "Sunny, 21 C."}]


def test_results_of_text_parts_become_user_text() -> None:
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "w", "arguments": {}}}],
        },
        {"role": "tool", "content": PARTS},
        {"role": "tool", "content": "Windy."},
    ]
    out = ADAPTERS["tool_as_user"](messages)
    assert out[-1] == {"role": "user", "content": "Sunny, 21 C.\nWindy."}


def test_a_system_prompt_goes_before_a_user_turn_of_parts_as_a_part() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PARTS}]
    (merged,) = ADAPTERS["system_into_user"](messages)
    assert merged == {"role": "user", "content": [{"type": "text", "text": "Be brief."}, *PARTS]}
    text = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert ADAPTERS["system_into_user"](text) == [{"role": "user", "content": "Be brief.\n\nHi"}]
