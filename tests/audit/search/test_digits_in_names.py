"""Digits in tool names and argument keys (``space.NAME_SHAPES``, ``pairs.KEYS``).

Real tool sets put digits in names (``s3_list_buckets``, ``web_search_v2``) and keys (``address_line1``); the
search's names and keys held none, so a template that rewrites an earlier call only where its name or a key holds a
digit was a clean SAFE on 1c96616, even at ``--search 200`` (red team 25, confirmed by hand). The templates
(``tests/data/search/digits/``, ChatML with tools on Qwen2.5's tokenizer) count the digits by arithmetic, which
gives template coverage no arm.
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe, assert_lost, sampled_call_rewritten
from tests.conftest import DATA, audit_of

DIGITS = DATA / "search" / "digits"


@pytest.mark.parametrize("where", ["name", "key"])
def test_arguments_dropped_for_digits_in_history_are_unsafe(where: str) -> None:
    """The result's append re-renders the sampled call with ``{}``: buffer + delta breaks, on one tool cycle."""
    call = sampled_call_rewritten(
        audit_of(MODEL, DIGITS / f"arguments_dropped_for_a_{where}_with_digits_in_history.jinja")
    )
    names = call["name"] if where == "name" else "".join(call["arguments"])
    assert any(c.isdigit() for c in names), call


def test_the_same_rewrite_on_every_turn_breaks_no_render_but_loses_the_arguments() -> None:
    """Arguments dropped on every turn for a name with digits: buffer + delta and the re-render hold, but the model
    never sees them (red team 44: a clean SAFE until the search read lost values)."""
    report = audit_of(MODEL, DIGITS / "control_arguments_dropped_for_a_name_with_digits_everywhere.jinja")
    assert_lost(report, "unsafe:drops_arguments")


def test_a_key_the_tool_does_not_declare_dropped_on_every_turn_is_a_clean_safe() -> None:
    """A key with digits dropped on every turn: no tool declares it (a template may write the schema's keys only)."""
    assert_clean_safe(audit_of(MODEL, DIGITS / "control_arguments_dropped_for_a_key_with_digits_everywhere.jinja"))
