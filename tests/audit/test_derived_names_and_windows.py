"""Rewrites of history the quick set (the corpus scan's, which draws no search) played past only by chance: a tool
result cut once it is old enough, and tool names rewritten once they are history (lower-cased, or with their dots
replaced). Each template here (tests/data/audit_greens/) is a plain ChatML tool template plus one such rewrite; each
was SAFE with ``--search 0`` on the main before this test. Found here from what the template's code reads: the long
episode's first tool cycle holds texts past the lengths it cuts, and a template that folds case or rewrites text
with a literal a name can hold plays names in mixed case holding it (``names/plain``)."""

from __future__ import annotations

import pytest

from tests.conftest import DATA as TEST_DATA
from tests.conftest import audit_of
from tito_audit.rendering.analysis import message_reads
from tito_audit.rendering.message_reads import MessageReads
from tito_audit.report.verdict import describe_reason
from tito_audit.scenarios.reach import EARLY_CHARS, LONG_EPISODE_CHARS, derive_reach

DATA = TEST_DATA / "audit_greens"
TOKENIZER = "qwen2.5-7b-instruct"


def audited(name: str, scenarios: str):
    return audit_of(TOKENIZER, DATA / f"{name}.jinja", scenarios=scenarios, search=0)


def hit_by(report, check: str) -> set[str]:
    return {f.scenario for f in report.check(check).findings}


def reach_of(name: str):
    return derive_reach(message_reads((DATA / f"{name}.jinja").read_text()))


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_a_result_cut_only_once_it_is_old_is_played_long_in_a_long_episode(scenarios: str) -> None:
    """``content[:64]`` on results more than six messages back: the catalogue's results are short, its long texts
    come in short episodes; the derived long episode's first result is long."""
    reach = reach_of("old_results_cut")
    assert reach.cycles and reach.early_length > 64
    r = audited("old_results_cut", scenarios)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert f"long/{reach.cycles}" in hit_by(r, "tool_append_prefix")


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_earlier_tool_names_lower_cased_are_played_in_mixed_case(scenarios: str) -> None:
    reach = reach_of("earlier_names_lowered")
    assert reach.mixed_case and reach.names == ()
    r = audited("earlier_names_lowered", scenarios)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert "names/plain" in hit_by(r, "tool_append_prefix")


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_dots_replaced_in_earlier_tool_names_are_played_in_a_name(scenarios: str) -> None:
    """``f.name.replace('.', '_')`` once a later assistant turn exists: the re-render differs from what was
    sampled (the append itself keeps the buffer a prefix, so TITO-REQUIRED)."""
    reach = reach_of("earlier_names_dotted")
    assert "." in reach.names and not reach.mixed_case
    r = audited("earlier_names_dotted", scenarios)
    assert r.verdict == "tito-required", r.verdict_reasons
    assert "names/plain" in hit_by(r, "history_rewrite")


def test_a_case_folding_that_rewrites_no_history_stays_safe() -> None:
    """The control: roles lower-cased on every turn alike; the names episode is played and finds nothing."""
    assert reach_of("role_lowered").renames
    r = audited("role_lowered", "quick")
    assert r.verdict == "safe", r.verdict_reasons
    assert not any(hit_by(r, check) for check in ("tool_append_prefix", "history_rewrite", "tool_support"))


def test_long_texts_a_long_episode_cannot_hold_are_named() -> None:
    """A window of 60 cycles and a cut at 19,000 characters: the first cycle's texts would add more than
    LONG_EPISODE_CHARS to the episode's renders; the length is named for it, never passed, and the first cycle
    holds the long texts every long episode's does (EARLY_CHARS)."""
    reads = MessageReads(count_thresholds=(60,), length_thresholds=(19_000,))
    reach = derive_reach(reads)
    assert reach.cycles == 61 and reach.length and reach.early_length == EARLY_CHARS
    assert "length:19000" in reach.not_probed
    assert "long episode" in describe_reason("not_probed:length:19000")  # what the verdict line says of it
    small = derive_reach(MessageReads(count_thresholds=(8,), length_thresholds=(64,)))
    assert small.early_length == EARLY_CHARS and "length:64" not in small.not_probed
    past = derive_reach(MessageReads(count_thresholds=(8,), length_thresholds=(3000,)))
    assert past.early_length == past.length and "length:3000" not in past.not_probed
    assert LONG_EPISODE_CHARS < 4 * 19_064 * (2 * 61 + 6)


@pytest.mark.parametrize(
    ("source", "folds"),
    [
        ("{{ f.name|lower }}", True),
        ("{{ f.name.upper() }}", True),
        ("{% set fold = f.name.lower %}{{ fold() }}", True),  # a method kept, then called
        ("{{ f.name|map('lower')|join }}", True),
        ("{{ (f.name|attr('swapcase'))() }}", True),
        ("{{ f.name.title() }}", True),
        ("{{ f.name|capitalize }}", True),
        ("{{ param.title }}", False),  # a JSON schema's "title", read
        ("{{ f.name|replace('W', 'w') }}", False),  # a fold of one letter written as a replace: the search's
        ("{{ f.name }}", False),
    ],
)
def test_every_way_jinja_names_a_case_fold_is_read(source: str, folds: bool) -> None:
    assert message_reads(source).folds_case is folds
