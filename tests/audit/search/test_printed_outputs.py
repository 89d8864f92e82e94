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

Red team 29 wrote 28 more, each a clean SAFE on 0819b3f. Sixteen wrote their literal plainly but removed it only at
a text's edge (``removesuffix('TERMINATE')``, ``removeprefix('functions.')``, ``trim('…')``), where the search
wrote each literal only inside a text, or translated characters by a table (``translate({8216: 39})``,
``maketrans('‘’“”', ...)``), which no reading held. Each literal is now written at a text's edges too
(``space._at_edges``), and a table's characters are read as one literal (``message_reads``). Twelve built their
words at run time, keyed on what agents and their users send: a ReAct answer, Cline's ``<environment_details>``, a
Playwright snapshot, JSON with ``NaN``, a quoted e-mail, a Slack mention, full-width punctuation, an ellipsis. The
sweep of what tools print and the user turns after it now send those (``outputs.TYPED``, ``REACT``).

The controls make the same change on every turn: clean SAFEs. One of red team 29's is not: a template that removes
``functions.`` from every call's name now meets a call named so, and ``tool_support`` reports that the call's name
is rendered nowhere (UNSAFE ``drops_tool_calls``): true of that template, though no TITO break. Four of red team
27's were SAFEs naming ``not_probed:parallel:N`` on 9cbdbd2, a number that was only ever a text's length
(``text_values``), and the index's third value, which a test's ``|int`` never picks (``literal_lookups.is_truth``).
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import assert_clean_safe, assert_lost
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
        # an argument masked only in history: it was looked for in the whole render, history included, and called
        # dropped (UNSAFE); each value is looked for in its own turn as sampled now, where it is whole
        ("phone_number_masked_in_history", "tito-required"),
        ("html_page_omitted_in_history", "tito-required"),
        ("markdown_images_placeholdered_in_history", "tito-required"),
        ("call_approved_after_yes", "tito-required"),
        # red team 29: literals removed at a text's edges, characters translated by a table, agents' formats
        ("terminate_removed_from_earlier_answers", "tito-required"),
        ("channel_mention_removed_in_history", "tito-required"),
        ("phone_signature_removed_in_history", "tito-required"),
        ("exit_footer_removed_in_history", "tito-required"),
        ("reply_line_removed_in_history", "tito-required"),
        ("api_prefix_removed_from_earlier_names", "tito-required"),
        ("ellipsis_trimmed_in_history", "tito-required"),
        ("ellipsis_stripped_in_history", "tito-required"),
        ("smart_quotes_by_maketrans_in_history", "tito-required"),
        ("smart_quotes_by_table_in_history", "tito-required"),
        ("soft_hyphens_removed_in_history", "tito-required"),
        ("zero_width_joiners_removed_in_history", "tito-required"),
        ("arabic_marks_removed_in_history", "tito-required"),
        ("skin_tones_removed_in_history", "tito-required"),
        ("ligatures_expanded_in_history", "tito-required"),
        ("bullets_replaced_in_history", "tito-required"),
        ("react_thought_dropped_in_history", "tito-required"),
        ("environment_details_dropped_in_history", "tito-required"),
        ("page_snapshot_refs_dropped_in_history", "tito-required"),
        ("json_nan_written_as_null_in_history", "tito-required"),
        ("quoted_email_dropped_in_history", "tito-required"),
        ("slack_mentions_rewritten_in_history", "tito-required"),
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
        "length_forty_always",
        "first_line_read_always",
        "system_reminder_stripped_always",
        # red team 28
        "calls_grouped_by_tool_always",
        "undeclared_keys_dropped_always",
        "numeric_result_formatted_always",
        "clear_read_history_kept_always",
        "call_marked_approved_always",
        # red team 29
        "terminate_removed_always",
        "smart_quotes_by_table_always",
        "soft_hyphens_removed_always",
        "quoted_email_dropped_always",
        "ellipsis_trimmed_always",
    ],
)
def test_the_same_change_on_every_turn_is_a_clean_safe(name: str) -> None:
    assert_clean_safe(audited(name))


def test_a_commit_hash_shortened_on_every_turn_breaks_no_render_but_loses_the_result() -> None:
    """Every commit hash in a result written as its first seven characters, on every turn: no render departs from
    another, but the model never sees the hash it would pass on (red team 44's reading of lost values)."""
    assert_lost(audited("commit_hash_shortened_always"), "unsafe:drops_tool_results")


@pytest.mark.parametrize("name", ["listing_counted_always", "python_words_by_pairs_always", "secret_withheld_always"])
def test_the_same_change_on_every_turn_that_hides_a_result_is_unsafe(name: str) -> None:
    """A listing written as its count, a tool's ``no`` written ``false``, an API key withheld, on every turn alike:
    no render departs from another, but the model never sees what the tool returned (red team 44's reading)."""
    assert_lost(audited(name), "unsafe:drops_tool_results")
