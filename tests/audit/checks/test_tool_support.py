"""tool_support calls arguments dropped only when the render does not hold them, in whatever form the template
writes them (issue 40, class 5): JSON, Python's repr of the dict, an escaped form of its own. A value cut short
is still dropped."""

from __future__ import annotations

import pytest

from tests.conftest import CORPUS, needs_corpus
from tests.conftest import DATA as TEST_DATA
from tito_audit import audit_model, load
from tito_audit.audit.context import AuditOptions

DATA = TEST_DATA / "serialization"
ONLY = AuditOptions(only_checks=("tool_support",))


def _tool_support(name: str):  # type: ignore[no-untyped-def]
    report = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / f"{name}.jinja")), ONLY)
    return report, report.check("tool_support")


@pytest.mark.parametrize("name", ["python_repr_arguments", "escaped_xml_arguments"])
def test_arguments_written_in_another_form_are_not_dropped(name: str) -> None:
    """Every argument value is in the render: as Python writes the dict (single quotes, `\\n` escapes, the code
    argument's double quotes as they are), or HTML-escaped inside elements (`&#34;`). Neither is JSON."""
    report, c = _tool_support(name)
    assert c.status == "pass", [f.message for f in c.findings]
    assert "unsafe:drops_arguments" not in report.verdict_reasons


def test_arguments_dropped_only_when_sent_as_a_string_are_a_form_to_avoid() -> None:
    """The escaped-XML template writes a call's arguments only when they are a mapping: sent as a JSON string
    (OpenAI's form, ``*/args_string``) they are gone. The value was found in the user's words before, a clean SAFE;
    now each value is looked for in its own turn, and the drop, confined to that form, is one to avoid
    (``tool_forms``), not the canonical form's."""
    report = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / "escaped_xml_arguments.jinja")))
    assert report.verdict == "safe" and "avoid:arguments_string" in report.verdict_reasons
    forms = report.check("tool_forms")
    assert any(f.reason == "arguments_string" and f.scenario.endswith("/args_string") for f in forms.findings)


def test_results_written_only_with_a_name_are_a_form_to_avoid() -> None:
    """Every scenario sends a tool message's `name`; OpenAI's tool messages have `tool_call_id` and content only. A
    template that writes the result only `if message.name` was a clean SAFE (red team 32): the first tool scenario
    is played again without names, and what it drops there is a form to avoid."""
    report = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / "results_only_with_a_name.jinja")))
    assert report.verdict == "safe" and "avoid:results_without_name" in report.verdict_reasons
    (finding,) = [f for f in report.check("tool_forms").findings if f.reason == "results_without_name"]
    assert finding.scenario.endswith("/no_name")
    plain = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / "results_upper_cased.jinja")))
    assert not any(r.startswith("avoid:") for r in plain.verdict_reasons)  # the same template, results with no gate


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        ("results_cut_past_100", "its last characters do not appear"),
        ("results_cut_in_the_middle", "its middle"),
        ("results_lines_unique", "its middle"),
        ("results_lines_sorted", "its middle"),
    ],
)
def test_long_results_cut_on_every_turn_are_named_not_dropped(name: str, missing: str) -> None:
    """Every result past 100 characters cut to its first 100, or past 600 to its first and last 250 with a note
    between (red team 32: clean SAFEs); every result's lines written each once, or sorted (red team 33: clean SAFEs
    while the long result's rows were unique and sorted; a warning printed twice in its middle now). Its start is
    shown, so it is not dropped, and buffer + delta holds; its end, then the whole of it, are looked for too, and
    the model never sees what is missing, which is named: `avoid:results_cut`."""
    report = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / f"{name}.jinja")))
    assert "unsafe:drops_tool_results" not in report.verdict_reasons
    assert report.verdict == "safe" and "avoid:results_cut" in report.verdict_reasons
    cut = [f for f in report.check("tool_forms").findings if f.reason == "results_cut"]
    assert cut and missing in cut[0].message


def test_an_argument_cut_short_is_dropped() -> None:
    """The same elements, each string value cut to its first 12 characters: the long code argument is not all
    there, whatever form the rest takes."""
    report, c = _tool_support("truncated_arguments")
    assert c.status == "fail" and "unsafe:drops_arguments" in report.verdict_reasons
    assert any(f.reason == "drops_arguments" for f in c.findings)


def test_a_call_turn_after_which_history_drops_an_older_result_has_its_calls() -> None:
    """Older results dropped once a new call turn follows (review 11's r3): the new call turn starts after the
    generation prompt, so its calls are the model's and none is dropped (they were called dropped when the turn's
    start was read past its own end); buffer + delta holds, the re-render does not."""
    _, c = _tool_support("older_results_dropped_by_id")
    assert not any(f.reason == "drops_tool_calls" for f in c.findings), [f.message for f in c.findings]
    full = audit_model(
        load("qwen2.5-7b-instruct", chat_template_file=str(DATA / "older_results_dropped_by_id.jinja")),
        AuditOptions(search=0),
    )
    assert full.verdict == "tito-required", full.verdict_reasons


@pytest.mark.parametrize(
    "name",
    [
        *("results_upper_cased", "results_periods_spaced", "results_block_reversed_everywhere"),
        *("names_upper_cased", "names_camel_cased", "names_dots_underscored", "names_namespace_cut"),
        *("results_html_escaped", "results_json_escaped"),
    ],
)
def test_traffic_written_in_another_form_on_every_turn_is_not_dropped(name: str) -> None:
    """Every tool result written alike on every turn in upper case, with a space before each period, or a block of
    parallel results in reverse order (each in a slot of its own: red team 32's control), HTML- or JSON-escaped
    (red team 33's controls: punctuation is compared once the escapes are undone); every
    call's name in upper case, camelCase, with dots as underscores, or without a `functions.` namespace (the search
    sends such names). Red teams 30 and 31's controls: the traffic is shown, buffer + delta holds, and the audit
    says SAFE. They were UNSAFE `drops_tool_results` or `drops_tool_calls` (the shape probe and the scenarios looked
    for the text verbatim)."""
    report = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / f"{name}.jinja")))
    assert report.check("tool_support").status == "pass", [f.message for f in report.check("tool_support").findings]
    assert report.verdict == "safe", report.verdict_reasons
    assert "avoid:results_cut" not in report.verdict_reasons  # the whole of a long result is there, in its form


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("results_cut_to_eight", "drops_tool_results"),
        ("results_as_their_length", "drops_tool_results"),
        ("results_digits_stripped", "drops_tool_results"),
        ("results_nan_written_null", "drops_tool_results"),
        ("results_first_of_parallel_only", "drops_tool_results"),
        ("results_only_in_history", "drops_tool_results"),
        ("results_first_of_conversation_everywhere", "drops_tool_results"),
        ("results_block_last_everywhere", "drops_tool_results"),
        ("arguments_first_call_turn_only", "drops_arguments"),
        ("arguments_first_parallel_only", "drops_arguments"),
        ("names_cut_to_three", "drops_tool_calls"),
        *[
            (f"results_{rewrite}", "drops_tool_results")
            for rewrite in ("negative_sign_dropped", "decimal_point_dropped", "digit_added", "sign_added")
        ],
        ("results_spaces_removed", "drops_tool_results"),
        *[
            (f"arguments_{rewrite}", "drops_arguments")
            for rewrite in ("strings_only", "numbers_as_int", "booleans_negated", "punctuation_lost")
        ],
    ],
)
def test_traffic_cut_rewritten_or_not_shown_when_sampling_is_dropped(name: str, reason: str) -> None:
    """Every tool result cut to eight characters, replaced by a note of its length, stripped of its digits (red
    team 31: a rule that took a result with more than half its letters for shown called these SAFE), or with a
    word rewritten (`NaN` as `null`: a rewrite cannot be told from a loss by letters alone); only the first of
    parallel results written (one copy of equal texts showed them all), or a result written only once it is not
    last (the prompt the model samples from never holds it; both were SAFE or TITO-REQUIRED); red team 32's clean
    SAFEs: every slot writing the conversation's first result or its block's last (equal texts in the scenarios:
    each result must show a marker of its own), arguments written `{}` after the first call turn or the first
    parallel call (a value is looked for in its own turn, once per call that carries it, not in the user's words
    or a sibling's copy); every call's name cut to three letters. Red team 33's clean SAFEs, each a rewrite that
    keeps every letter and digit in order (the rule before compared only those): a result's `-` or `.` dropped, a
    digit or a sign added, its spaces removed (numbers run together); only string arguments written, numbers written
    as integers, booleans negated, a string argument's quotes, backslashes and slashes lost (only top-level strings
    were looked for)."""
    report, c = _tool_support(name)
    assert c.status == "fail" and f"unsafe:{reason}" in report.verdict_reasons
    assert any(f.reason == reason for f in c.findings)


@needs_corpus
def test_a_call_written_only_before_its_turn_is_dropped() -> None:
    """DeepSeek-R1-Distill-Qwen-32B's template writes a later call turn's calls inside the tool block before the
    generation prompt: the turn the model samples holds no call. The marker test for names in another form must
    read the name's place in the turn, not in the history before it (it did, for a moment: a clean pass)."""
    model = load(
        "qwen2.5-7b-instruct", chat_template_file=str(CORPUS / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")
    )
    report = audit_model(model, ONLY)
    assert any(f.reason == "drops_tool_calls" for f in report.check("tool_support").findings)


def test_a_result_written_only_in_part_when_sent_as_parts_is_a_form_to_avoid() -> None:
    """A result sent as a list of text parts written as its first part only (red team 33: a clean SAFE; every
    scenario sends results as text): `tool_forms` plays the first tool scenario again with each result as two
    parts, and names the form. The bundled Qwen2.5 template writes such a list as Python writes it: both parts are
    there, garbled, not lost, and nothing is named."""
    report = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / "results_parts_first_only.jinja")))
    assert report.verdict == "safe" and "avoid:results_as_parts" in report.verdict_reasons
    assert any(f.scenario.endswith("/parts") for f in report.check("tool_forms").findings)
    plain = audit_model(load("qwen2.5-7b-instruct"))
    assert "avoid:results_as_parts" not in plain.verdict_reasons
