"""History rewrites the quick set (the corpus scan's, which draws no search) missed because the template writes the
number or the literal they key on in a form the reading did not follow: a window kept as a position
(``messages[loop.index0 + 6] is defined``) or as arithmetic (``loop.revindex0 // 7``), a cut by lines or words
(``content.split('\\n')[:3]``), a length written as joined strings (``('4' ~ '000')|int``), separators kept in a table
(``{':': '_', '/': '_'}``); then a second red team's: a budget kept in a table of settings (``cfg.clip``,
``budget[message.role]``), as a setting's default (``max_chars|default(1500)``), as ``2 ** 11`` or ``(300 * 3.5)|int``,
the loop under another name (``set outer = loop``, a macro's parameter), a split kept in a variable, an old result
reduced to its first line or paragraph or with its whitespace squeezed. Each template (tests/data/audit_greens/) is a
plain ChatML tool template plus one such rewrite, and each was SAFE with ``--search 0`` on the main before this test
(537c06d); the controls rewrite every turn alike and are SAFE (``results_squeezed_always`` was called
``drops_tool_results`` there)."""

from __future__ import annotations

import pytest
from jinja2 import Environment

from tests.conftest import DATA as TEST_DATA
from tests.conftest import audit_of
from tito_audit.rendering.analysis import message_reads
from tito_audit.rendering.message_reads import CHARACTERS_PER_LINE, CHARACTERS_PER_WORD, read_messages
from tito_audit.scenarios.reach import derive_reach, long_text

DATA = TEST_DATA / "audit_greens"
TOKENIZER = "qwen2.5-7b-instruct"


# a counter counting up, divided: a branch from the twelfth message on
COUNTED_UP = (
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m if ns.n // 12 }}{% endfor %}"
)


# the loop given to a macro as a parameter of its own
MACRO_GIVEN_LOOP = (
    "{% macro r(m, pos) %}{{ m if pos.revindex > 6 }}{% endmacro %}{% for m in messages %}{{ r(m, loop) }}{% endfor %}"
)


def reads(source: str):
    return read_messages(Environment().parse(source))


def hit_by(report, check: str) -> set[str]:
    return {f.scenario for f in report.check(check).findings}


@pytest.mark.parametrize(
    ("source", "count"),
    [
        ("{% for m in messages %}{% if messages[loop.index0 + 6] is defined %}x{% endif %}{% endfor %}", 6),
        ("{% for m in messages %}{% if loop.revindex0 // 7 %}x{% endif %}{% endfor %}", 7),
        ("{% for m in messages %}{{ (loop.index0 - 9) % 2 }}{% endfor %}", 9),
        (COUNTED_UP, 12),
    ],
)
def test_a_window_kept_as_a_position_or_as_arithmetic_is_a_conversation_length(source: str, count: int) -> None:
    assert count in reads(source).count_thresholds


def test_arithmetic_that_reads_no_counter_is_no_window() -> None:
    source = "{% for m in messages %}{{ m.content[:7 // 2] }}{{ 40 // 3 }}{% endfor %}"
    assert not {13, 7, 3} & set(reads(source).count_thresholds)


@pytest.mark.parametrize(
    ("cut", "chars"),
    [
        ("content.split('\\n')[:3]", 3 * CHARACTERS_PER_LINE),
        ("content.splitlines()[:3]", 3 * CHARACTERS_PER_LINE),
        ("content.split(' ')[:400]", 400 * CHARACTERS_PER_WORD),
        ("content.split()[:400]", 400 * CHARACTERS_PER_WORD),
        ("content.split(None)[:400]", 400 * CHARACTERS_PER_WORD),
        ("content.split('\\n')[4]", 5 * CHARACTERS_PER_LINE),
    ],
)
def test_a_cut_by_lines_or_words_is_a_text_length_of_as_many(cut: str, chars: int) -> None:
    source = "{% for m in messages %}{% set content = m.content %}{{ " + cut + " }}{% endfor %}"
    assert chars in reads(source).length_thresholds


def test_pieces_between_other_separators_are_no_lines_or_words() -> None:
    """``split('</think>')[-1]`` takes the answer after the reasoning: its pieces are not words, and no length
    follows from the index."""
    source = "{% for m in messages %}{{ m.content.split('</think>')[-1] }}{% endfor %}"
    assert reads(source).length_thresholds == (1,)


def test_a_long_text_is_long_in_characters_words_and_lines() -> None:
    text = long_text(3 * CHARACTERS_PER_LINE + 64, "result")
    assert len(text.split("\n")) > 3 and len(text.split(" ")) > 3 * CHARACTERS_PER_LINE // CHARACTERS_PER_WORD


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("{% set clip = ('4' ~ '000') | int %}{{ x[:clip] }}", 4000),
        ("{% set s = '12' %}{% set n = s | int %}{{ x[:n] }}", 12),
        ("{% set clip = ('30' + '0') | int %}{{ x[:clip] }}", 300),
        ("{{ x[:'x1500'[1:] | int] }}", 1500),
        # kept in a table, as a setting's default, or as arithmetic
        ("{% set cfg = {'keep': 6, 'clip': 1000} %}{{ x[:cfg.clip] }}", 1000),
        ("{% set cfg = {'keep': 6, 'clip': 1000} %}{{ x[:cfg['clip']] }}", 1000),
        ("{% set budget = {'tool': 1200, 'user': 4000} %}{{ x[:budget[m.role]] }}", 4000),
        ("{% set clip = max_chars | default(1500) %}{{ x[:clip] }}", 1500),
        ("{{ x[:2 ** 11] }}", 2048),
        ("{{ x[:(300 * 3.5) | int] }}", 1050),
        ("{{ x[:(1000 / 4) | round | int] }}", 250),
    ],
)
def test_a_number_written_as_strings_kept_in_a_table_a_default_or_arithmetic_is_read(source: str, value: int) -> None:
    """Each form a length the template cuts with may take: the number is read, and played past."""
    assert value in reads(source).length_thresholds


def test_no_number_is_read_from_arithmetic_past_its_bounds() -> None:
    """``10 ** 100``, ``2 ** -1`` and ``(1 / 0)|int`` are no numbers: only their own constants are read."""
    found = reads("{{ x[:10 ** 100] }}{{ y[:2 ** -1] }}{{ z[:(1 / 0) | int] }}").length_thresholds
    assert set(found) == {0, 1, 2, 10, 100}


@pytest.mark.parametrize(
    "source",
    [
        "{% for m in messages %}{% set outer = loop %}{% if outer.revindex > 6 %}x{% endif %}{% endfor %}",
        MACRO_GIVEN_LOOP,
    ],
)
def test_the_loop_under_another_name_is_a_conversation_length(source: str) -> None:
    assert 6 in reads(source).count_thresholds


@pytest.mark.parametrize(
    "cut",
    [
        "{% set words = content.split(' ') %}{{ words[:400] }}",
        "{% set words = content.split(' ') if content is string else [] %}{{ words[:400] }}",
    ],
)
def test_a_text_split_into_a_variable_counts_its_words(cut: str) -> None:
    source = "{% for m in messages %}{% set content = m.content %}" + cut + "{% endfor %}"
    assert 400 * CHARACTERS_PER_WORD in reads(source).length_thresholds


def test_a_separator_a_template_takes_from_a_string_it_slices_is_read() -> None:
    """``'mcp__'[3:]`` is ``'__'``: split with, it is a literal the template looks for."""
    source = "{% set sep = 'mcp__'[3:] %}{% for m in messages %}{{ m.name.split(sep) }}{% endfor %}"
    assert "__" in reads(source).tested_literals


def test_separators_kept_in_a_table_are_held_literals_a_name_episode_plays() -> None:
    source = "{% set SEP = {':': '_', '/': '_'} %}{% for m in messages %}{{ m.content }}{% endfor %}"
    found = reads(source)
    assert {":", "/"} <= set(found.held_literals)
    reach = derive_reach(found)
    assert reach.renames and {":", "/"} <= set(reach.names)


@pytest.mark.parametrize(
    ("name", "verdict", "check", "scenario"),
    [
        ("old_results_lines", "unsafe", "tool_append_prefix", "long/"),
        ("old_results_words", "unsafe", "tool_append_prefix", "long/"),
        ("old_results_offset", "unsafe", "tool_append_prefix", "long/"),
        ("old_results_clip_joined", "unsafe", "tool_append_prefix", "long/"),
        # a second red team's forms: a table of settings, settings with defaults, the loop given to a macro with a
        # budget of (300 * 3.5)|int, an old result's first line, its whitespace squeezed
        ("old_results_settings", "unsafe", "tool_append_prefix", "long/"),
        ("old_results_defaults", "unsafe", "tool_append_prefix", "long/"),
        ("old_results_macro_loop", "unsafe", "tool_append_prefix", "long/"),
        ("old_results_first_line", "unsafe", "tool_append_prefix", "long/"),
        ("old_results_squeezed", "unsafe", "tool_append_prefix", "long/"),
        # separators mapped once the call is history: the re-render differs from what was sampled, the append
        # keeps the buffer a prefix (TITO-REQUIRED, as earlier_names_dotted)
        ("earlier_names_table", "tito-required", "history_rewrite", "names/plain"),
    ],
)
def test_each_rewrite_is_found_without_the_search(name: str, verdict: str, check: str, scenario: str) -> None:
    r = audit_of(TOKENIZER, DATA / f"{name}.jinja", scenarios="quick", search=0)
    assert r.verdict == verdict, r.verdict_reasons
    assert any(s.startswith(scenario) for s in hit_by(r, check)), hit_by(r, check)


def test_a_table_of_separators_applied_to_every_turn_alike_stays_safe() -> None:
    """The control: the same table rewrites user and system text on every turn alike; the names episode is played
    with its separators and finds nothing to report."""
    template = DATA / "names_table_every_turn.jinja"
    assert {":", "/"} <= set(derive_reach(message_reads(template.read_text())).names)
    r = audit_of(TOKENIZER, template, scenarios="quick", search=0)
    assert r.verdict == "safe", r.verdict_reasons
    assert not any(hit_by(r, check) for check in ("tool_append_prefix", "history_rewrite", "naive_rerender"))


@pytest.mark.parametrize("name", ["results_squeezed_always", "results_compacted_always"])
def test_a_result_written_otherwise_in_every_turn_alike_is_no_dropped_result(name: str) -> None:
    """Controls: every result squeezed (the control of old_results_squeezed), or every JSON result written compact,
    the newest too. Every letter and digit of the result is rendered where it is: no result is dropped (537c06d
    said ``drops_tool_results`` of the first, f22175c of the second), and no history is rewritten."""
    r = audit_of(TOKENIZER, DATA / f"{name}.jinja", scenarios="quick", search=0)
    assert r.verdict == "safe", r.verdict_reasons
    assert r.check("tool_support").status == "pass"


def test_a_result_replaced_in_every_turn_alike_is_still_dropped() -> None:
    """Every JSON result replaced by a note: written in place fails (the marker is replaced too), so the result is
    dropped."""
    r = audit_of(TOKENIZER, DATA / "results_json_omitted.jinja", scenarios="quick", search=0)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert {f.reason for f in r.check("tool_support").findings} == {"drops_tool_results"}
