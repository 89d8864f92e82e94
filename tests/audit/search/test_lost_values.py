"""Red team 44: templates that lose a value of tool traffic on every turn alike, where the model is shown it.

Each template (``tests/data/search/lost/``) is the bundled Qwen2.5 template with one rewrite made on every turn, not
only in history: an argument rounded, made positive, cut to its first record or two keys, its repeats dropped, or
left out for a tool name in mixed case; a result stripped of its tags, cut to its first record or page, its
decimals rounded, written as an integer, or left out for a tool name in mixed case. Buffer + delta and the naive
re-render agree on every conversation (nothing in history changes), and no catalogue scenario holds the value:
each was a clean SAFE (exit 0), confirmed lost by hand with ``apply_chat_template``. The search now reads every
conversation it plays as ``tool_support`` reads a scenario (``search.property.LOST``): a counterexample of kind
``lost``, shown as a searched scenario, makes the verdict UNSAFE by ``tool_support``'s own finding.
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import MODEL
from tests.audit.search.qwen_rewrites import audited as qwen_rewrite
from tests.conftest import DATA, audit_of

LOST = DATA / "search" / "lost"
ARGUMENTS = (
    "big_ints_through_float",
    "floats_rounded",
    "negative_numbers_made_positive",
    "array_of_records_first_only",
    "arguments_dropped_for_mixed_case_names",
    "first_two_arguments_only",
    "array_repeats_dropped",
)
RESULTS = (
    "html_results_tags_stripped",
    "record_results_first_only",
    "result_decimals_rounded",
    "results_omitted_for_mixed_case_names",
    "results_first_page_only",
    "numeric_results_as_int",
)


@pytest.mark.parametrize("name", ARGUMENTS + RESULTS)
def test_a_value_lost_on_every_turn_is_found_by_the_search(name: str) -> None:
    reason = "unsafe:drops_arguments" if name in ARGUMENTS else "unsafe:drops_tool_results"
    r = qwen_rewrite(LOST, name)
    assert r.verdict == "unsafe" and reason in r.verdict_reasons, r.verdict_reasons
    (found, *_) = r.scenarios["search"]["counterexamples"]
    assert found["kind"] == "lost", found
    findings = [f for c in r.checks if c.id == "tool_support" for f in c.findings]
    assert any(f.scenario == found["scenario"] for f in findings), findings
    # the catalogue alone holds no such value: without the search, the same template is a clean SAFE
    without = audit_of(MODEL, LOST / f"{name}.jinja", search=0)
    assert without.verdict == "safe", without.verdict_reasons


def test_the_unchanged_template_loses_nothing_the_search_sends() -> None:
    """The control: the bundled template itself, searched for every kind, stays a clean SAFE."""
    r = audit_of(MODEL)
    assert r.verdict == "safe" and not r.scenarios.get("not_probed"), r.verdict_reasons
    search = r.scenarios["search"]
    assert "lost" in search["looked_for"] and search["counterexamples"] == [], search
