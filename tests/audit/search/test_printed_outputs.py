"""Red team 27: history rewrites of Qwen2.5's template keyed on what tools print, in the formats they print it.

Each template (``tests/data/search/printed/``) picks its rewrite of earlier results by an index into three values
(``[c, NEW, c][(hist and [A, B]|min)|int]``), by ``selectattr`` over a literal list of pairs, or by ``.get`` on a
``{% set %}`` table: a CSV export cut to its first rows, a data URI replaced, an HTTP response's headers dropped, a
JSON Web Token redacted, a directory listing counted, a commit hash shortened, a link's tracking parameters
stripped, a YAML document's ``---`` dropped, a diff summarized, a Python tool's ``None``/``True`` written as JSON; and
a reasoning's Markdown title dropped once the turn is not last, a coding agent's ``<system-reminder>`` stripped from
earlier user turns. On 9cbdbd2 each was a SAFE that named the index's untaken arm (exit 3) or a clean SAFE (the
pairs), and no conversation held the format. The sweep of content forms now prints each (``forms.TOOL_OUTPUTS``,
``PLAN``, ``REMINDER``) and the words a template compares a whole text with (``compared_literals``): each is found.

The controls make the same change on every turn: clean SAFEs. Four of them were SAFEs naming
``not_probed:parallel:N`` on 9cbdbd2, a number that was only ever a text's length (``text_values``), and the index's
third value, which a test's ``|int`` never picks (``literal_lookups.is_truth``).
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import assert_clean_safe
from tests.audit.search.qwen_rewrites import audited as qwen_rewrite
from tests.conftest import DATA

PRINTED = DATA / "search" / "printed"


def audited(name: str):  # type: ignore[no-untyped-def]
    return qwen_rewrite(PRINTED, name)


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        ("csv_export_cut_in_history", "tito-required"),
        ("data_uri_replaced_in_history", "tito-required"),
        ("http_headers_dropped_in_history", "tito-required"),
        ("token_redacted_by_shape_in_history", "tito-required"),
        ("listing_counted_in_history", "tito-required"),
        ("commit_hash_shortened_in_history", "tito-required"),
        ("tracking_parameters_stripped_in_history", "tito-required"),
        ("yaml_marker_dropped_in_history", "tito-required"),
        ("diff_summarized_in_history", "tito-required"),
        ("python_words_by_pairs_in_history", "tito-required"),
        ("python_words_by_table_in_history", "tito-required"),
        ("system_reminder_stripped_in_history", "tito-required"),
        ("reasoning_title_dropped_when_not_last", "unsafe"),
    ],
)
def test_a_rewrite_keyed_on_a_printed_format_is_found(name: str, verdict: str) -> None:
    r = audited(name)
    assert r.verdict == verdict, r.verdict_reasons
    assert not r.scenarios.get("not_probed"), r.scenarios.get("not_probed")
    (found, *_) = r.scenarios["search"]["counterexamples"]
    assert "searched:" in found["conversation"]


@pytest.mark.parametrize(
    "name",
    [
        "csv_export_cut_always",
        "commit_hash_shortened_always",
        "length_forty_always",
        "first_line_read_always",
        "listing_counted_always",
        "python_words_by_pairs_always",
        "system_reminder_stripped_always",
    ],
)
def test_the_same_change_on_every_turn_is_a_clean_safe(name: str) -> None:
    assert_clean_safe(audited(name))
