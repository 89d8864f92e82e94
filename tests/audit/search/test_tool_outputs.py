"""Review 15: history rewrites of Qwen2.5's template keyed on what tools return and loops send, after red team 14.

Each template (``tests/data/search/outputs/``) picks its rewrite of earlier messages by a lookup
(``{True: A, False: B}[hist and COND]``) or a list comparison, so that template coverage has no arm to name, and
each was a clean SAFE (exit 0) under e88658d's default search, even at ``--search 200`` for most, confirmed broken
by hand with ``apply_chat_template``. They key on a tool's output as text (a zip code's leading zero, a price's
trailing zero, a sign, a JSON boolean, an ISO timestamp, a base64 blob, carriage returns, Unicode spaces, a
Markdown table, HTML with an entity, an XML declaration), on arguments (a whole float, a negative zero, a list with
an item twice, a zero-padded string), on a result named otherwise than its call (a framework's tool class), on
parallel results in completion order, and on a ``developer`` message. The space now holds each
(``audit/search/space.py``, ``conversations.py``), and a sweep's break is shrunk by halves first
(``shrink._fewer``), so that a longer sweep's shrink fits the template's render budget. The controls make the
same change on every turn: still clean SAFEs.
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import assert_clean_safe, assert_lost
from tests.audit.search.qwen_rewrites import audited as qwen_rewrite
from tests.conftest import DATA

OUTPUTS = DATA / "search" / "outputs"


def audited(name: str):  # type: ignore[no-untyped-def]
    return qwen_rewrite(OUTPUTS, name)


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("zero_padded_result_as_int_in_history", "tito-required"),
        ("decimal_result_normalized_in_history", "tito-required"),
        ("xml_declaration_stripped_in_history", "tito-required"),
        ("base64_result_omitted_in_history", "tito-required"),
        ("line_ends_normalized_in_history", "tito-required"),
        ("iso_timestamp_rewritten_in_history", "tito-required"),
        ("unicode_spaces_squeezed_in_history", "tito-required"),
        ("markdown_table_compacted_in_history", "tito-required"),
        ("boolean_result_capitalized_in_history", "tito-required"),
        ("negative_result_relabelled_in_history", "tito-required"),
        ("html_result_stripped_in_history", "tito-required"),
        ("result_name_shown_when_not_a_call_in_history", "tito-required"),
        # results matched to their calls by position, in history: out of order, a block's first result goes to the
        # slot the last one fills with its own, and the prompt the model samples from never holds it (a drop)
        ("results_by_call_position_in_history", "unsafe"),
        ("developer_as_system_in_history", "tito-required"),
        ("whole_floats_as_ints_in_history", "unsafe"),
        ("negative_zero_dropped_in_history", "unsafe"),
        ("zero_padded_argument_as_int_in_history", "unsafe"),
        ("repeated_list_items_dropped_in_history", "unsafe"),
    ],
)
def test_a_rewrite_keyed_on_a_tool_output_or_a_loop_form_is_found(name: str, verdict: str) -> None:
    r = audited(name)
    assert r.verdict == verdict, r.verdict_reasons
    (found, *_) = r.scenarios["search"]["counterexamples"]
    assert "searched:" in found["conversation"]


def test_a_sweep_that_breaks_is_shrunk_within_the_template_budget() -> None:
    """The sweeps' break on a zero-padded argument: the first conversation breaks, and the shrink keeps one cycle,
    where dropping its thirty-odd cycles one by one had spent the template's characters and kept them all."""
    search = audited("zero_padded_argument_as_int_in_history").scenarios["search"]
    assert search["drawn"] == 1 and "stopped" not in search
    assert search["counterexamples"][0]["conversation"].startswith("searched: 4 messages, 1 call(s)")


@pytest.mark.parametrize(
    "name",
    [
        "control_line_ends_normalized_everywhere",
        pytest.param(
            "control_iso_timestamp_rewritten_everywhere",
            # the same instant written otherwise (``T`` as a space, ``Z`` as `` UTC``) on every turn: a form, but the
            # search's reading of lost values (red team 44) looks for a result's text as it was sent, and calls it lost
            marks=pytest.mark.xfail(strict=True, reason="a known false red: a timestamp reformatted is called lost"),
        ),
        "control_unicode_spaces_squeezed_everywhere",
        "control_whole_floats_as_ints_everywhere",
    ],
)
def test_the_same_change_on_every_turn_stays_a_clean_safe(name: str) -> None:
    assert_clean_safe(audited(name))


def test_cycles_are_dropped_by_halves_first() -> None:
    """``_fewer`` on 32 tool cycles where only the 23rd breaks: that one cycle is kept, in far fewer plays
    than one per cycle, and a text alone before a call goes with its cycle."""
    from tito_audit.audit.search.shrink import _cycles, _fewer

    messages: list[dict] = [{"role": "user", "content": "go"}]  # type: ignore[type-arg]
    for k in range(32):
        if k % 4 == 0:
            messages.append({"role": "assistant", "content": f"text {k}"})
        call = {"id": f"c{k}", "type": "function", "function": {"name": "f", "arguments": {"k": k}}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]}, {"role": "tool", "content": str(k)}]
    messages.append({"role": "assistant", "content": "done"})
    plays = []

    def breaks(ms: list[dict]) -> bool:  # type: ignore[type-arg]
        plays.append(len(ms))
        return any(m.get("content") == "22" for m in ms)

    kept = _fewer(messages, _cycles, breaks)
    assert [m.get("content") for m in kept] == ["go", None, "22", "done"]
    assert len(_cycles(kept)) == 1 and len(plays) < 16  # one by one: 31 plays, each of a longer conversation
    with_text = _fewer(messages, _cycles, lambda ms: any(m.get("content") == "text 20" for m in ms))
    assert [m.get("content") for m in with_text] == ["go", "text 20", None, "20", "done"]


@pytest.mark.parametrize(
    "name",
    [
        "zero_padded_result_as_int_in_history",
        "decimal_result_normalized_in_history",
        "base64_result_omitted_in_history",
        "html_result_stripped_in_history",
    ],
)
def test_a_result_rewritten_only_in_history_is_not_called_dropped(name: str) -> None:
    """The model is shown each result when its block is appended; the template writes it otherwise (or leaves it
    out) only once it is history. That is a rewrite of the history: the token buffer keeps what the model was shown,
    so buffer + delta stays exact and only the re-render breaks (``tito-required``), never ``drops_tool_results``
    (on de5514b these were ``unsafe`` for that reason where the rewritten text no longer held the result's, and
    ``tito-required`` where it still did: ``-7`` written ``-7.0``)."""
    r = audited(name)
    assert "unsafe:drops_tool_results" not in r.verdict_reasons, r.verdict_reasons
    assert r.verdict == "tito-required" and "tito-required:naive_rerender" in r.verdict_reasons, r.verdict_reasons


def test_a_zero_padded_result_as_int_on_every_turn_breaks_no_render_but_loses_the_result() -> None:
    """A result of digits with leading zeros (a postcode, ``02134``) written as an integer on every turn: no render
    departs from another, but the model never sees ``02134`` (red team 44's reading of lost values)."""
    assert_lost(audited("control_zero_padded_as_int_everywhere"), "unsafe:drops_tool_results")
