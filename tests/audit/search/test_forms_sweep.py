"""Content in the forms clients send that no other conversation of the search sent (``search/forms.py``).

Several text parts in one message, an image beside text, arguments as a model wrote them (pretty-printed JSON), and
tool output holding a terminal's and a file's invisible characters: a template that rewrites one of them in earlier
turns only was a clean SAFE on c232071 (red team 23's seven, each confirmed by hand). The templates
(``tests/data/search/forms/``) are ChatML with tools on Qwen2.5's tokenizer; each picks its rewrite by a lookup on a
string key (template coverage counts its arms now, ``tests/rendering/test_coverage_lookups.py``: these are found).
"""

from __future__ import annotations

import json

import pytest

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe, assert_lost
from tests.conftest import DATA, audit_of
from tito_audit.audit.search.accepted import held

FORMS = DATA / "search" / "forms"
SEARCH = DATA / "search"


def _found(name: str, kind: str) -> list[dict]:  # type: ignore[type-arg]
    report = audit_of(MODEL, FORMS / f"{name}.jinja")
    assert report.verdict == ("unsafe" if kind == "append" else "tito-required"), report.verdict_reasons
    (found, *_) = report.scenarios["search"]["counterexamples"]
    assert found["kind"] == kind, found
    return found["messages"]  # type: ignore[no-any-return]


def test_an_image_written_otherwise_in_history_is_found() -> None:
    messages = _found("image_as_a_placeholder_in_history", "rerender")
    parts = [p for m in messages if isinstance(m["content"], list) for p in m["content"]]
    assert {"type": "image"} in parts, messages


def test_text_parts_joined_otherwise_in_history_are_found() -> None:
    messages = _found("parts_joined_by_lines_in_history", "rerender")
    assert any(isinstance(m["content"], list) and len(m["content"]) > 1 for m in messages), messages


def test_a_recording_written_otherwise_in_history_is_found() -> None:
    """Red team 24: parts beside text and images (a recording, a file) were never sent."""
    messages = _found("audio_as_a_placeholder_in_history", "rerender")
    parts = [p for m in messages if isinstance(m["content"], list) for p in m["content"]]
    assert any(p.get("type") == "input_audio" for p in parts), messages


def test_an_answers_text_parts_joined_otherwise_in_history_are_unsafe() -> None:
    """Red team 24: an answer whose content is a list of text parts (Anthropic's content blocks converted); the
    template joins them otherwise once the call turn is history, so the result's append re-renders it."""
    messages = _found("answer_parts_joined_by_lines_in_history", "append")
    assert any(m["role"] == "assistant" and isinstance(m["content"], list) for m in messages), messages


def test_pretty_printed_arguments_compacted_in_history_are_unsafe() -> None:
    """The result's append re-renders the sampled call: buffer + delta breaks, so UNSAFE."""
    messages = _found("argument_strings_compacted_in_history", "append")
    strings = [c["function"]["arguments"] for m in messages for c in m.get("tool_calls") or []]
    assert any(isinstance(a, str) and "\n" in a for a in strings), strings


def test_invisible_characters_removed_from_earlier_output_are_found() -> None:
    messages = _found("invisible_characters_removed_in_history", "rerender")
    results = "".join(str(m["content"]) for m in messages if m["role"] == "tool")
    assert any(c in results for c in "\ufeff\u2028\u2029\x07\b"), results


@pytest.mark.parametrize(
    "name",
    [
        "control_image_as_a_placeholder_everywhere",
        "control_parts_joined_by_lines_everywhere",
        "control_argument_strings_compacted_everywhere",
        "control_invisible_characters_removed_everywhere",
        "control_audio_as_a_placeholder_everywhere",
        "control_answer_parts_joined_by_lines_everywhere",
        "control_error_details_cut_everywhere",
    ],
)
def test_the_same_form_rewrite_on_every_turn_is_a_clean_safe(name: str) -> None:
    assert_clean_safe(audit_of(MODEL, FORMS / f"{name}.jinja"))


def test_an_error_object_replaced_on_every_turn_breaks_no_render_but_loses_the_result() -> None:
    """A JSON error object replaced by a generic one on every turn: no render departs from another, but the model
    never sees the error (its code, its message): a lost result (red team 44's reading)."""
    assert_lost(audit_of(MODEL, FORMS / "control_error_object_replaced_everywhere.jinja"), "unsafe:drops_tool_results")


def test_a_template_that_refuses_the_forms_names_nothing_for_them() -> None:
    """The plain template concatenates content, so it refuses a list of parts: the sweep's five blocks of parts
    are dropped, and since their texts are played elsewhere, the SAFE stays clean (their forms carry no value a
    loop could send this template)."""
    report = audit_of(MODEL, SEARCH / "base.jinja")
    assert_clean_safe(report)
    assert report.scenarios["search"]["refused"]["forms"]["dropped"] == 5, report.scenarios["search"]


def test_what_a_refused_block_held_is_its_values_not_its_form() -> None:
    """``held``: each text part's text (an image carries none), a JSON string's values, nothing for a string that
    is not JSON; text and dict arguments as before."""
    call = lambda arguments: {"type": "function", "function": {"name": "f", "arguments": arguments}}  # noqa: E731
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Paris"}, {"type": "image"}]},
        {"role": "assistant", "content": None, "tool_calls": [call('{\n  "city": "Lyon"\n}'), call('{"city": "Ni')]},
        {"role": "assistant", "content": "ok", "tool_calls": [call({"unit": 3})]},
    ]
    assert held(messages) == {json.dumps(v) for v in ("Paris", "Lyon", "ok", 3)}


# Red team 26: results that are no prose and an agent's name, rewritten in earlier turns only. Each was a clean SAFE
# on f3108b0 (each confirmed by hand with apply_chat_template); each is found now.
NOT_PROSE = {
    "empty_results_summarized_in_history": lambda m: m["role"] == "tool" and m["content"] in ("[]", "{}", "null"),
    "error_details_cut_in_history": lambda m: (
        m["role"] == "tool" and m["content"].startswith("Error:") and "\n" in m["content"].strip()
    ),
    # it counts the items of any result in brackets: ``[]`` too, which the sweep also sends as a result of its own
    # (a key its lookup compares: ``compared_literals``), the shortest counterexample
    "records_counted_in_history": lambda m: m["role"] == "tool" and m["content"][:1] + m["content"][-1:] == "[]",
    "error_object_replaced_in_history": lambda m: m["role"] == "tool" and m["content"].startswith('{"error"'),
}


@pytest.mark.parametrize("name", sorted(NOT_PROSE))
def test_a_result_that_is_no_prose_rewritten_in_history_is_found(name: str) -> None:
    messages = _found(name, "rerender")
    assert any(NOT_PROSE[name](m) for m in messages if isinstance(m.get("content"), str)), messages


def test_an_agents_name_in_its_header_is_found() -> None:
    """A loop that names who spoke (``name`` on an assistant turn): the template writes it in the header of the
    turn once it is history, where the generation prompt the model sampled after had none."""
    messages = _found("agent_name_in_headers", "rerender")
    assert any(m["role"] == "assistant" and m.get("name") for m in messages), messages
