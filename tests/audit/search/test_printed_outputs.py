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

Red team 28 wrote seventeen more, most of them building the words they look for at run time (``'%s%s-' % ('s',
'k')``, a list of reversed words) so that no literal of theirs could be read, and keying them on what agent traffic
carries: parallel calls grouped by tool (A, B, A), calls that disagree with their schema (a key it does not declare,
a number where it declares a string, a value past its ``maximum``, a ``dry_run`` flag), a result that is a number or
a string returned as JSON, an ``.env`` file's API key, bidirectional controls, a bearer token, a macOS home path, a
phone number, an HTML page, a Markdown image in an answer, a user's ``/clear``, a user's "yes" to what the agent
asked. Each was a clean SAFE on 9cbdbd2; the sweeps now send each (``forms``, ``schemas``, ``sweep_ids``,
``sweep_agent``), and each is found.

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
        # red team 28
        ("calls_grouped_by_tool_in_history", "tito-required"),
        ("undeclared_keys_dropped_in_history", "tito-required"),
        ("numbers_quoted_by_schema_in_history", "tito-required"),
        ("values_clamped_to_maximum_in_history", "tito-required"),
        ("numeric_result_formatted_in_history", "tito-required"),
        ("dry_run_summarized_in_history", "tito-required"),
        ("json_string_result_unquoted_in_history", "tito-required"),
        ("secret_withheld_in_history", "tito-required"),
        ("bidi_controls_stripped_in_history", "tito-required"),
        ("bearer_token_redacted_in_history", "tito-required"),
        ("home_path_shortened_in_history", "tito-required"),
        ("history_dropped_after_clear", "tito-required"),
        ("phone_number_masked_in_history", "unsafe"),
        ("html_page_omitted_in_history", "tito-required"),
        ("markdown_images_placeholdered_in_history", "tito-required"),
        ("call_approved_after_yes", "tito-required"),
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
        # red team 28
        "calls_grouped_by_tool_always",
        "undeclared_keys_dropped_always",
        "numeric_result_formatted_always",
        "secret_withheld_always",
        "clear_read_history_kept_always",
        "call_marked_approved_always",
    ],
)
def test_the_same_change_on_every_turn_is_a_clean_safe(name: str) -> None:
    assert_clean_safe(audited(name))
