"""Red team 14: history rewrites of Qwen2.5's template keyed on values and message forms the search did not send.

Each template (``tests/data/search/forms/``) is the bundled Qwen2.5 template with one rewrite of earlier messages
only, and each was a clean SAFE (exit 0) under d10da76's default search, confirmed broken by hand with
``apply_chat_template`` (an earlier turn's text changes once the conversation goes on). They key on: a user's
``name``; a tool result that is a list of text parts or a JSON object; an integer past 2**53, a float of nine
decimals or below 1e-4 in a call's arguments; a result that is a number, holds an email address, or is one line of
thousands of characters; an answer sent with ``tool_calls: []``. Seven of them compute the rewrite at the top of the
loop behind an ``if`` that everyday traffic takes both ways, so template coverage has nothing to name: only a
conversation that holds the value finds them. The search's space now holds each value and form
(``audit/search/space.py``, ``conversations.py``). The controls make the same change on every turn (a prefix-
preserving template): still clean SAFEs.
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe
from tests.audit.search.qwen_rewrites import audited as qwen_rewrite
from tests.conftest import DATA

FORMS = DATA / "search" / "forms"


def audited(name: str):  # type: ignore[no-untyped-def]
    return qwen_rewrite(FORMS, name)


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("user_name_shown_in_history", "tito-required"),
        ("user_name_shown_by_lookup", "tito-required"),
        ("result_joined_in_history", "tito-required"),  # a list or an object of a result joined
        ("result_parts_joined_in_history", "tito-required"),
        ("object_result_as_json_in_history", "tito-required"),
        ("big_ints_through_float_in_history", "unsafe"),
        ("big_ints_as_floats_in_history", "unsafe"),
        ("floats_rounded_in_history", "unsafe"),
        ("small_floats_fixed_in_history", "unsafe"),
        ("numeric_result_as_int_in_history", "tito-required"),
        ("numeric_result_labelled_in_history", "tito-required"),
        ("emails_linked_in_history", "tito-required"),
        ("result_lines_cut_in_history", "tito-required"),
        ("long_result_line_truncated_in_history", "tito-required"),
        ("answer_with_empty_calls_trimmed_in_history", "tito-required"),
        ("answer_with_empty_calls_trimmed_by_lookup", "tito-required"),
    ],
)
def test_a_rewrite_keyed_on_a_value_or_form_of_agent_traffic_is_found(name: str, verdict: str) -> None:
    r = audited(name)
    assert r.verdict == verdict, r.verdict_reasons
    search = r.scenarios["search"]
    assert search["counterexamples"], search  # the search found it, shown as a searched scenario
    found = [f for c in r.checks for f in c.findings if f.scenario.startswith("search/")]
    assert found
    # a divergence at its first divergent token; a result the render no longer holds, named by its message
    assert all(f.index is not None for f in found if f.check != "tool_support")
    assert all("tool result (message" in f.message for f in found if f.check == "tool_support")


@pytest.mark.parametrize(
    "name",
    [
        "control_user_name_everywhere",
        "control_object_result_as_json_everywhere",
        "control_arguments_sorted_everywhere",
        "control_long_lines_truncated_everywhere",
        "control_tabs_expanded_everywhere",
        "control_booleans_as_python_everywhere",
    ],
)
def test_the_same_change_on_every_turn_stays_a_clean_safe(name: str) -> None:
    assert_clean_safe(audited(name))


def test_results_in_other_forms_are_drawn_only_where_the_template_renders_them() -> None:
    """Qwen2.5 writes a result's content as it is: parts and objects render, and the space draws them. The search's
    ChatML template adds a result's content to text: both raise there, so no draw is spent on a form it refuses."""
    from tito_audit import load
    from tito_audit.audit.context import AuditContext, AuditOptions
    from tito_audit.audit.search.space import SearchSpace

    qwen = SearchSpace.of(AuditContext(load(MODEL), AuditOptions()))
    assert qwen.result_parts and qwen.result_objects
    assert {"02134", "19.90"} <= set(qwen.texts) and any("@" in t for t in qwen.texts)
    assert any(len(t) > 2_000 and "\n" not in t for t in qwen.texts)  # one line of thousands of characters
    chatml = load("qwen3-0.6b", chat_template_file=str(DATA / "search" / "base.jinja"))
    plain = SearchSpace.of(AuditContext(chatml, AuditOptions()))
    assert not plain.result_parts and not plain.result_objects
