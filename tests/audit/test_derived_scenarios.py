"""Wrong greens in `audit`/`scan` (red team, branch redteam-audit): templates written for these tests
(tests/data/audit_greens/), each a plain ChatML tool template plus one rewrite that no catalogue scenario reached on
main, where every one came out SAFE. Each rewrite is real (a token buffer and the re-render part); here it is
found from what the template's code tests, in the quick set (the corpus scan's) and the full one."""

from __future__ import annotations

import pytest

from tests.conftest import DATA as TEST_DATA
from tests.conftest import audit_of
from tito_audit import audit_model, load
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.rendering.analysis import message_reads
from tito_audit.scenarios.reach import MAX_COUNT, derive_reach

DATA = TEST_DATA / "audit_greens"
TOKENIZER = "qwen2.5-7b-instruct"


def audited(name: str, scenarios: str = "quick"):
    return audit_of(TOKENIZER, DATA / f"{name}.jinja", scenarios=scenarios)


def scenarios_with_findings(report, check: str) -> set[str]:
    return {f.scenario for f in report.check(check).findings}


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_a_window_over_the_last_messages_is_played_past_its_length(scenarios: str) -> None:
    """R1: ``messages[-12:]`` drops the first message once a 13th is appended (a tool result, here)."""
    assert message_reads((DATA / "window.jinja").read_text()).count_thresholds == (12,)
    r = audited("window", scenarios)
    assert r.verdict == "unsafe", r.verdict_reasons
    hit = scenarios_with_findings(r, "tool_append_prefix")
    assert "long/13" in hit
    if scenarios == "full":  # the catalogue's own long episode (16 messages) reaches it without the template's code
        assert "long_episode/plain" in hit


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_earlier_answers_truncated_past_a_length_are_played_past_it(scenarios: str) -> None:
    """R2: ``|truncate(240)`` on earlier answers rewrites a long answer once a user turn follows it. The scenarios
    find it (TITO-REQUIRED); the search finds more: a call turn with a long text next to its call (twenty lines of
    code) is cut too once its result is appended, which breaks buffer + delta (UNSAFE)."""
    assert message_reads((DATA / "truncate_answers.jinja").read_text()).length_thresholds == (240,)
    r = audit_of(TOKENIZER, DATA / "truncate_answers.jinja", scenarios=scenarios, search=0)
    assert r.verdict == "tito-required", r.verdict_reasons
    hit = scenarios_with_findings(r, "history_rewrite")
    assert any(s.startswith("long_text/") for s in hit)
    if scenarios == "full":  # the catalogue's long answer
        assert "followup_user/long_answer" in hit
    searched = audited("truncate_answers", scenarios)
    assert searched.verdict == "unsafe" and "search/1" in scenarios_with_findings(searched, "tool_append_prefix")


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_escaped_quotes_folded_in_earlier_arguments_break_the_tool_append(scenarios: str) -> None:
    """R3: ``args.replace('\\\\"', "'")`` on earlier calls: a string argument holding a quote is rewritten as soon as
    its result is appended."""
    r = audited("quote_folding", scenarios)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert "unsafe:rewrites_on_tool_append" in r.verdict_reasons
    hit = scenarios_with_findings(r, "tool_append_prefix")
    assert "literals/plain" in hit  # derived from the literal the template replaces
    if scenarios == "full":  # the catalogue's code arguments (quotes, backslash, newline, non-ASCII)
        assert "single_call/code_args" in hit


def test_inline_reasoning_stripped_from_earlier_call_turns_only_is_unsafe() -> None:
    """R4: a delimiter pair kept on answers and dropped from earlier tool-call turns is reasoning (probed on both
    kinds of turn); dropping it on the tool append is a rewrite on the append itself."""
    ctx = AuditContext(load(TOKENIZER, chat_template_file=str(DATA / "scratch_on_calls.jinja")), AuditOptions())
    assert ctx.shapes.reasoning.mode == "inline"
    assert ctx.shapes.reasoning.tags == ("[SCRATCH]", "[/SCRATCH]")
    r = audited("scratch_on_calls")
    assert r.verdict == "unsafe", r.verdict_reasons
    assert any(s.startswith("reasoning") for s in scenarios_with_findings(r, "tool_append_prefix"))


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_a_turn_cut_inside_its_reasoning_is_continued_and_compared(scenarios: str) -> None:
    """R5: the template closes the reasoning block after the reasoning it is given, so a turn cut inside its
    reasoning, handed back parsed, continues after a closed block: the continuation check must cut there too."""
    c = audited("reasoning_block", scenarios).check("continuation")
    assert c.status == "warn", c.summary
    assert c.findings and all("in its reasoning (parsed)" in f.message for f in c.findings)
    assert "in reasoning:" in c.summary


def test_continuation_names_a_reasoning_cut_it_could_not_compare() -> None:
    """R5: where reasoning reaches the render but no played answer shows it (thinking off pre-fills a closed
    block), the summary says the reasoning cut was not compared instead of passing it silently."""
    model = load("qwen3-0.6b")
    c = audit_model(model, AuditOptions(scenarios="quick", thinking="off")).check("continuation")
    played = "in reasoning:" in c.summary
    assert played or "cut inside its reasoning was not compared" in c.summary, c.summary


def test_what_no_derived_scenario_reaches_is_named() -> None:
    """Past the longest derived episode, and a rewrite literal that is a control token's text: named, never passed."""
    far = MAX_COUNT + 6
    template = (
        f"{{%- if messages|length > {far} %}}X{{% endif %}}"
        "{%- for m in messages %}{{ m.content.replace('<|im_end|>', '').replace('@@', '') }}{% endfor %}"
    )
    reach = derive_reach(message_reads(template), (), ["<|im_end|>"])
    assert reach.cycles == 0
    assert f"count:{far}" in reach.not_probed
    assert "literal:<|im_end|>" in reach.not_probed
    assert reach.literals == ("@@",)


def test_thresholds_are_read_from_counters_and_loop_indices() -> None:
    template = (
        "{%- set ns = namespace(calls=0) %}{%- for m in messages %}"
        "{%- if m.tool_calls %}{%- set ns.calls = ns.calls + 1 %}{%- endif %}"
        "{%- if ns.calls > 5 or loop.revindex > 20 %}old{% endif %}{%- if loop.index0 % 2 == 0 %}{% endif %}"
        "{{ m.content[:80] }}{% endfor %}"
    )
    reads = message_reads(template)
    assert max(reads.count_thresholds) == 20 and 5 in reads.count_thresholds
    assert reads.length_thresholds == (80,)


# Red team, round 4: each a ChatML tool template that shows earlier calls with 12 or more top-level arguments as
# ``{}``, the choice made without an ``{% if %}`` coverage could count (a ``selectattr`` over candidates, a
# ``loop.cycle`` of period 12, a macro called through an alias, a renamed message loop, a ``for``/``else`` over a
# slice). Every one was a clean SAFE (exit 0) on the quick set with no search.
WIDE = ["selectattr", "cycle", "macro_alias", "renamed_loop", "for_else"]


@pytest.mark.parametrize("name", WIDE)
def test_a_rewrite_keyed_on_the_number_of_arguments_is_played_at_and_past_it(name: str) -> None:
    r = audit_of(TOKENIZER, DATA / f"wide_arguments_{name}.jinja", scenarios="quick", search=0)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert "unsafe:rewrites_on_tool_append" in r.verdict_reasons
    assert any(s.startswith("wide/") for s in scenarios_with_findings(r, "tool_append_prefix"))


def test_the_widths_played_are_each_number_and_one_past_it() -> None:
    """``[0] * 11 + [1]`` sizes a list walked beside the arguments (``loop.cycle``): calls with 11 and 12
    arguments (its period of 12 is hit at 12 exactly, not past it); ``|length >= 12`` adds 13."""
    reads = message_reads((DATA / "wide_arguments_cycle.jinja").read_text())
    assert 11 in reads.length_thresholds
    assert derive_reach(reads).widths == (11, 12)
    assert derive_reach(message_reads((DATA / "wide_arguments_selectattr.jinja").read_text())).widths == (12, 13)
    # a text length past the widest count is a text length: no wide episode for ``content|length > 300``
    assert derive_reach(message_reads("{{ messages[0].content|length > 300 }}")).widths == ()


# Red team, round 5, on the same base: the rewrite keyed on the number of parallel calls, on 64 or more arguments,
# on the items of a list argument, on a threshold written as arithmetic or kept in a variable or a namespace, on a
# length ordered against another value (the tool list's, the conversation's), on a count of what a text holds.
# Each was a clean SAFE on the quick set with no search after ``wide/N`` first landed.
WIDE_5 = {
    "parallel_calls_over_3": "parallel/",
    "parallel_calls_12": "parallel/",
    "arithmetic_threshold": "wide/",
    "namespace_threshold": "wide/",
    "variable_threshold": "wide/",
    "arguments_64": "wide/",
    "list_argument_12": "wide/",
    "relative_to_tools": "wide/",
    "relative_to_messages": "wide/",
    "counted_colons": "wide/",
}


# Red team, round 5, still clean SAFEs with no search after it: the rewrite keyed on the braces of the arguments'
# JSON (objects nested past 3: ``(arguments|tojson).count('{') > 3``), and on the longest key name
# (``keys|map('length')|max > 24``). The wide episode now grows its calls in those counts too.
WIDE_5 |= {"nested_depth": "wide/", "key_name_length": "wide/"}
# Round 6: an item read at a fixed index (``keys[11] is defined``), a count of objects in a list argument (more than
# 20 braces), and a parallel-call count hidden behind unused slice bounds that took every width the episode played.
WIDE_5 |= {"item_index_11": "wide/", "objects_over_20": "wide/", "masked_by_slices": "parallel/"}
# Round 6 too: a tool name longer than 40 characters (MCP-style names), four distinct tools called in one turn, a
# word count (``|wordcount > 1000``), a threshold bound by a loop over a literal list (``for th in [3000]``) or
# picked from one (``[3000]|first``), four or more arrays in the arguments (``.count('[') >= 4``).
WIDE_5 |= {
    "name_len_40": "wide/",
    "distinct_names_4": "parallel/",
    "wordcount_1000": "long_text/",
    "forvar_strlen_3000": "long_text/",
    "strlen_first_filter_3000": "long_text/",
    "arrays_4": "wide/",
}


@pytest.mark.parametrize("name", sorted(WIDE_5))
def test_a_rewrite_keyed_on_a_count_the_catalogue_never_reaches_is_played(name: str) -> None:
    r = audit_of(TOKENIZER, DATA / f"wide_{name}.jinja", scenarios="quick", search=0)
    assert r.verdict == "unsafe", r.verdict_reasons
    hit = scenarios_with_findings(r, "tool_append_prefix")
    assert any(s.startswith(WIDE_5[name]) for s in hit), hit


@pytest.mark.parametrize(
    ("expression", "widths"),
    [
        ("keys|length >= 6 * 2", (12, 13)),  # arithmetic of constants
        ("keys|length >= '12'|int", (12, 13)),  # a number written as text
        ("keys|length >= 'abcdefghijkl'|length", (12, 13)),  # the length of a literal
        ("keys|length >= (range(3)|list * 4)|length", (12, 13)),  # of a list built from a range
        ("keys|length > tools|length * 5", (5, 6, 32, 33)),  # against a value the code does not fix: 32 too
        ("text.count(':') >= 12", (12, 13)),  # a count of what a text holds
        ("(keys|map('length')|list + [0])|max > 24", (24, 25)),  # the longest key name
        ("keys[11] is defined", (12, 13)),  # an item at a fixed index: that many items and one more
        ("keys|length > [12]|first", (12, 13)),  # picked from a literal list
        ("keys|length > [3, 12]|max", (12, 13)),  # the one picked
    ],
)
def test_the_numbers_a_length_is_tested_against_are_read_without_running_the_template(
    expression: str, widths: tuple[int, ...]
) -> None:
    template = "{%- for m in messages %}{% set keys = m|list %}{% set text = m.content %}{% if " + expression
    template += " %}x{% endif %}{%- endfor %}"
    assert derive_reach(message_reads(template)).widths == widths


def test_a_threshold_kept_in_a_variable_is_read_through_it() -> None:
    for setup, test in (
        ("{% set th = 12 %}", "th"),
        ("{% set ns0 = namespace(th=12) %}", "ns0.th"),
        ("{% set ns0 = namespace(th=0) %}{% set ns0.th = 6 * 2 %}", "ns0.th"),
    ):
        template = setup + "{%- for m in messages %}{% if m.content|length >= " + test + " %}x{% endif %}{%- endfor %}"
        assert 12 in message_reads(template).length_thresholds, setup


def test_a_number_written_in_other_digits_is_not_read_and_breaks_nothing() -> None:
    """``'²'|int`` is no number Python's ``int`` reads (``'²'.isdigit()`` is true): the reading skips it and keeps
    the rest of what the template reads."""
    template = "{%- for m in messages %}{% if m.content|length > '²'|int or m.content|length > 300 %}x{% endif %}"
    reads = message_reads(template + "{%- endfor %}")
    assert reads.length_thresholds == (300,) and "content" in reads.message_keys


def test_numbers_past_any_sane_size_are_not_computed() -> None:
    """The template is untrusted: a huge product is not a threshold, and reading it computes nothing large."""
    template = "{%- for m in messages %}{% if m.content|length > 99999999 * 99999999 %}x{% endif %}{%- endfor %}"
    assert 99999999 in message_reads(template).length_thresholds
    assert 99999999 * 99999999 not in message_reads(template).length_thresholds


@pytest.mark.parametrize("scenarios", ["quick", "full"])
def test_a_derived_scenario_the_template_refuses_is_named_never_passed(scenarios: str) -> None:
    """The selectattr template, refusing any list argument: the wide episode (whose first added argument is a list)
    raises, so the rewrite at 12 arguments is never played. Before, the full set's SAFE was clean (exit 0)."""
    r = audit_of(TOKENIZER, DATA / "wide_refused_lists.jinja", scenarios=scenarios, search=0)
    assert r.verdict == "safe" and "not_probed:scenario:wide/13" in r.verdict_reasons, r.verdict_reasons


def test_counts_past_the_widths_one_episode_plays_are_named() -> None:
    """Ten numbers tested: the episode plays the largest widths, and every number left out is named, never passed."""
    tests = " or ".join(f"keys|length > {n}" for n in (3, 5, 7, 9, 11, 13, 15, 17, 19, 21))
    template = "{%- for m in messages %}{% set keys = m|list %}{% if " + tests + " %}x{% endif %}{%- endfor %}"
    reach = derive_reach(message_reads(template))
    assert reach.widths == (15, 16, 17, 18, 19, 20, 21, 22)
    assert [r for r in reach.not_probed if r.startswith("width:")] == [f"width:{n}" for n in (3, 5, 7, 9, 11, 13)]


def test_a_parallel_call_count_past_what_is_played_is_named() -> None:
    """``tool_calls|length > 16``: turns of 16 parallel calls at most are played; the count past it is named (a
    caveat, exit 3), never a clean SAFE."""
    r = audit_of(TOKENIZER, DATA / "wide_parallel_over_16.jinja", scenarios="quick", search=0)
    assert r.verdict == "safe" and "not_probed:parallel:16" in r.verdict_reasons, r.verdict_reasons


@pytest.mark.parametrize(
    ("measured", "text"),
    [
        ("(m.content|string)|length == 40", True),  # red team 27's controls: a text's length
        ("m.content|trim|length > 40", True),
        ("m.content.split('\\n')[:40]|join('') != ''", True),  # its first lines (80 characters a line)
        ("m.content.strip().count('.') > 40", True),
        ("m.content|length > 40", False),  # content may be a list of parts
        ("m.tool_calls|length > 40", False),
        ("(m.tool_calls|list)|length > 40", False),
    ],
)
def test_a_number_only_a_text_is_measured_with_counts_no_calls(measured: str, text: bool) -> None:
    """A number a text's length is tested against is no count of parallel calls: ``not_probed:parallel:N`` named it
    on every such template, a caveat no conversation could clear (``text_values``). A length that may count items
    (a message's content, a list) is still named past the parallel calls played."""
    template = "{%- for m in messages %}{% if " + measured + " %}x{% endif %}{%- endfor %}"
    reads = message_reads(template)
    assert bool(reads.text_lengths) == text, reads
    parallel = [r for r in derive_reach(reads).not_probed if r.startswith("parallel:")]
    assert bool(parallel) != text, parallel


def test_a_threshold_bound_by_a_loop_over_literals_or_a_word_count_is_read() -> None:
    template = "{%- for m in messages %}{% for th in [3000, 40] %}{% if m.content|length > th %}x{% endif %}"
    assert message_reads(template + "{% endfor %}{%- endfor %}").length_thresholds == (40, 3000)
    words = "{%- for m in messages %}{% if m.content|wordcount > 1000 %}x{% endif %}{%- endfor %}"
    assert message_reads(words).length_thresholds == (1000, 8000)  # and as characters: 8 a word
    # an item at a position counts items; a large number is a key (Seed-OSS: ``budget_reflections[16384]``)
    keyed = "{% set b = {0: 'a', 16384: 'b'} %}{%- for m in messages %}{{ b[16384] }}{{ m.tool_calls[11] }}{% endfor %}"
    assert message_reads(keyed).length_thresholds == (12,)


@pytest.mark.parametrize("name", ["zero_width", "ansi"])
def test_a_literal_the_template_looks_for_in_a_result_is_played(name: str) -> None:
    """Round 7: the arguments of an earlier call dropped once its result holds a zero-width space (``'\\u200b' in
    result``) or an ANSI colour code (``'\\x1b[' in result``: shell output), a clean SAFE under ``--search 0`` and
    under the default search: a literal the template looks for in text is now written in every text of
    ``literals/plain``."""
    r = audit_of(TOKENIZER, DATA / f"looked_for_{name}.jinja", scenarios="quick", search=0)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert any(s.startswith("literals/") for s in scenarios_with_findings(r, "tool_append_prefix"))
