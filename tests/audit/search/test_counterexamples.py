"""Issue 40, class 1: history rewrites that depend on values no catalogue scenario sends (tests/data/search/).

Each template is a plain ChatML tool template with reasoning (``base.jinja``, SAFE with and without the search)
plus one rewrite of earlier turns only, keyed on what real agent traffic sends: tool names in capitals or with
dots, calls of more than three arguments (now found first by the derived ``wide`` scenarios), reasoning with
whitespace at its edges, a one-line text next to a call, reasoning in a long episode. On 507ac91 (no search) each
came out SAFE with no caveat; here the search finds a counterexample, shrinks it, and the checks judge it like any
other scenario.
"""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import DATA, audit_of
from tito_audit.audit.search.conversations import ID_STYLES, call_id
from tito_audit.audit.search.space import CALL_TEXTS, EDGES, NAME_SHAPES, SearchSpace
from tito_audit.audit.search.sweep import sweep, sweep_ids, sweep_texts, sweep_turns

TEMPLATES = DATA / "search"
TOKENIZER = "qwen3-0.6b"  # has every control token the templates write (<|im_start|>, <tool_call>, <think>)


def audited(name: str, **options: object):  # type: ignore[no-untyped-def]
    return audit_of(TOKENIZER, TEMPLATES / f"{name}.jinja", scenarios="quick", **options)


def counterexample(report, check: str):  # type: ignore[no-untyped-def]
    """The search's counterexample (its scenario's messages) and the first finding the check made on it."""
    found = [f for f in report.check(check).findings if f.scenario.startswith("search/")]
    assert found, (check, report.verdict_reasons, report.scenarios.get("search"))
    return found[0]


def test_the_plain_template_stays_safe_under_the_search() -> None:
    """The control: the same template without a rewrite draws every conversation and finds nothing."""
    r = audited("base")
    assert r.verdict == "safe", r.verdict_reasons
    search = r.scenarios["search"]
    assert search["drawn"] == search["budget"] and search["counterexamples"] == []
    assert not any(x.startswith("search") for x in r.scenarios.get("not_probed", []))


@pytest.mark.parametrize(
    ("name", "verdict", "check", "shown", "without"),
    [
        # rewritten on every turn but the last: a tool append already rewrites it (buffer + delta breaks); the
        # fold written so that no reading of the code sees it (name_case.jinja's is played by names/plain, below)
        ("name_case_hidden", "unsafe", "tool_append_prefix", ("weather", "wEATHER"), "safe"),
        ("call_text_dropped", "unsafe", "tool_append_prefix", None, "safe"),
        # the catalogue's reasoning follow-up shows the re-render break; only a long episode with reasoning on
        # every turn shows that a tool append already breaks buffer + delta
        ("reasoning_window", "unsafe", "tool_append_prefix", None, "tito-required"),
        # rewritten in the turns before the last user message: the re-render breaks, buffer + delta holds
        ("mcp_names_hidden", "tito-required", "naive_rerender", "_", "safe"),
        # names namespaced by ':' or '/' (``weather:get_forecast``): shapes the search's names hold since this test
        ("namespaced_names_hidden", "tito-required", "naive_rerender", "_", "safe"),
        ("reasoning_trim", "tito-required", "naive_rerender", None, "safe"),
        # keyed on call ids and repeated calls (red team 10; each SAFE under f22175c's search): ids a loop numbers
        # per turn (``call_0`` again), ids not in call order (Mistral's random ones), a call made twice alike
        ("result_name_by_id", "tito-required", "naive_rerender", None, "safe"),
        ("attempts_by_id", "unsafe", "tool_append_prefix", None, "safe"),
        ("calls_sorted_by_id", "tito-required", "naive_rerender", None, "safe"),
        ("repeated_calls_dropped", "tito-required", "naive_rerender", None, "safe"),
        # keyed on Anthropic's id prefix (``toolu_``), which no drawn id style writes: the ids sweep plays it
        ("args_compacted_for_vendor_ids", "tito-required", "naive_rerender", None, "safe"),
        # keyed on two assistant messages in a row (red team 10's r18 and r25; each SAFE under d656679's search, which
        # never played one): the sweep of texts now has a text alone, then the call, and the buffer appends the
        # generation prompt alone between them
        ("assistant_turns_merged", "tito-required", "naive_rerender", None, "safe"),
        ("assistant_text_dropped_before_assistant", "tito-required", "naive_rerender", None, "safe"),
        # red team 12 (each SAFE with exit 0 under dc74207's search, which played one pair: a one-line text, then a
        # call): the sweep of assistant turns in a row plays texts with whitespace at their edges and on two lines,
        # an answer then another, a call then another; the sweep of values answers every other call past its name
        # shapes by its id alone
        ("answers_in_a_row_first_dropped", "tito-required", "naive_rerender", None, "safe"),
        ("assistant_in_a_row_extra_line", "tito-required", "naive_rerender", None, "safe"),
        ("text_before_call_trimmed", "tito-required", "naive_rerender", None, "safe"),
        ("text_before_call_first_line", "tito-required", "naive_rerender", None, "safe"),
        # calls dropped from history: the template drops tool traffic (the finding names the second message, whose
        # start the render that drops the first one's call hides: a wrong index, left)
        ("calls_in_a_row_first_dropped", "unsafe", "naive_rerender", None, "safe"),
        ("unnamed_result_labelled_in_history", "tito-required", "naive_rerender", None, "safe"),
        # ... and three SAFE with exit 3 there (the arm named): three in a row, a call turn's empty text, a long text
        ("three_in_a_row_first_dropped", "tito-required", "naive_rerender", None, "safe"),
        ("text_before_empty_call_text_dropped", "tito-required", "naive_rerender", None, "safe"),
        ("long_text_before_assistant_dropped", "tito-required", "naive_rerender", None, "safe"),
        # review 13 (each a clean SAFE under e99c580's search): four in a row, a result with neither an id nor a
        # name, a result's extra key, a call turn's text before another call turn, an answer the next goes on from,
        # a call's JSON-string arguments before another call turn
        ("four_in_a_row_first_dropped", "tito-required", "naive_rerender", None, "safe"),
        ("anonymous_result_labelled_in_history", "tito-required", "naive_rerender", None, "safe"),
        ("result_extra_keys_while_last", "tito-required", "naive_rerender", None, "safe"),
        ("text_of_call_before_call_dropped", "tito-required", "naive_rerender", None, "safe"),
        ("answer_continued_dropped", "tito-required", "naive_rerender", None, "safe"),
        ("string_arguments_before_call_reencoded", "tito-required", "naive_rerender", None, "safe"),
    ],
)
def test_a_rewrite_of_earlier_turns_is_found_by_the_search(
    name: str, verdict: str, check: str, shown: str | tuple[str, ...] | None, without: str
) -> None:
    r = audited(name)
    assert r.verdict == verdict, r.verdict_reasons
    finding = counterexample(r, check)
    assert finding.index is not None  # shown at its first divergent token, like every finding
    if shown is not None:  # the rewritten text, in whichever name shape the search shrank to
        assert any(text in "".join(finding.actual.tokens) for text in ((shown,) if isinstance(shown, str) else shown))
    # the same template without the search: what the catalogue alone says (what 507ac91 said)
    assert audited(name, search=0).verdict == without


@pytest.mark.parametrize(
    ("name", "verdict", "check"),
    [("name_case", "unsafe", "tool_append_prefix"), ("mcp_names", "tito-required", "naive_rerender")],
)
def test_names_rewritten_in_history_are_found_without_the_search(name: str, verdict: str, check: str) -> None:
    """``f.name|lower`` and ``f.name|replace('.', '_')`` on earlier calls: the search found them on names in capitals
    and dotted names; the fold and the '.' are now read from the template, and names in mixed case holding it are
    played (``names/plain``), so the scenarios find them first."""
    r = audited(name, search=0)
    assert r.verdict == verdict, r.verdict_reasons
    assert "names/plain" in {f.scenario for f in r.check(check).findings}


def test_arguments_reserialized_past_a_number_the_template_writes_are_found_without_the_search() -> None:
    """``f.arguments|length > 3`` on earlier calls: the search found it on a call of four arguments; the number is
    now read from the template and played at and past it (``wide/4``), so the scenarios find it first and the
    search is not needed."""
    r = audited("reserialized_args", search=0)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert any(f.scenario.startswith("wide/") for f in r.check("tool_append_prefix").findings)


def test_the_counterexample_is_shrunk_to_what_the_rewrite_needs() -> None:
    """A tool name in capitals is what the rewrite needs: the minimal conversation is one call of no arguments and
    its result, not the episode first drawn."""
    search = audited("name_case_hidden").scenarios["search"]
    (found,) = search["counterexamples"]
    assert found["kind"] == "append"
    assert "4 messages, 1 call(s)" in found["conversation"] and "up to 0 argument(s)" in found["conversation"]
    names = audited("mcp_names_hidden").scenarios["search"]["counterexamples"][0]["conversation"]
    assert "mcp.weather.get_forecast" in names


def test_the_same_seed_gives_the_same_counterexample_and_another_seed_still_finds_one() -> None:
    first = audited("name_case_hidden").scenarios["search"]
    again = audit_of(TOKENIZER, TEMPLATES / "name_case_hidden.jinja", scenarios="quick", search_seed=0, search=40)
    assert again.scenarios["search"]["counterexamples"] == first["counterexamples"]
    other = audited("name_case_hidden", search_seed=7)
    assert other.verdict == "unsafe"
    assert other.scenarios["search"]["seed"] == 7 and other.scenarios["search"]["counterexamples"]


def test_search_off_is_said_and_a_verdict_already_unsafe_is_not_searched() -> None:
    off = audited("base", search=0)
    assert off.scenarios["search"] == {"budget": 0, "seed": 0, "skipped": "off (--search 0)"}
    unsafe = audit_of(TOKENIZER)  # stock Qwen3: its catalogue already shows a rewrite on a tool append
    assert unsafe.verdict == "unsafe"
    assert unsafe.scenarios["search"]["skipped"] == "the scenarios already make the verdict unsafe"


def test_a_result_named_by_the_first_call_with_its_id_stays_safe_under_the_search() -> None:
    """The control of result_name_by_id: the first call with the result's id names it, which no later message
    changes; ids numbered per turn are played and nothing is found."""
    r = audited("result_name_by_id_first")
    assert r.verdict == "safe", r.verdict_reasons
    search = r.scenarios["search"]
    assert search["drawn"] == search["budget"] and search["counterexamples"] == []


def test_call_ids_come_in_every_style_loops_write() -> None:
    """Per-turn ids repeat from turn to turn; random ones are not in the order of the calls (a sort reorders them);
    the conversation-wide counters never repeat."""
    per_turn = [call_id("per_turn", n, j) for n, j in ((1, 0), (2, 1), (3, 0))]
    assert per_turn == ["call_0", "call_1", "call_0"]
    random = [call_id("random", n, 0) for n in range(1, 9)]
    assert len(set(random)) == 8 and sorted(random) != random and all(len(i) == 9 and i.isalnum() for i in random)
    assert len({call_id(style, n, 0) for style in ("short", "long") for n in range(1, 50)}) == 98
    assert set(ID_STYLES) == {"short", "long", "none", "per_turn", "random"}


def test_the_ids_sweep_repeats_a_call_and_reuses_ids_across_turns() -> None:
    """``sweep_ids``: a turn of parallel calls, the second the first again, ids out of call order; then ``call_0``
    in two turns, each another tool's; then Anthropic's and Kimi's ids; then a second user turn and ``call_0``
    again. Without parallel calls, one call a turn."""
    messages = sweep_ids(SearchSpace()).messages
    turns = [m["tool_calls"] for m in messages if m.get("tool_calls")]
    first = turns[0]
    assert first[0]["function"] == first[1]["function"]
    ids = [c["id"] for c in first]
    assert sorted(ids) != ids
    ids_after = [t[0]["id"] for t in turns[1:]]
    assert ids_after[:2] == ["call_0", "call_0"] and ids_after[-1] == "call_0"
    assert ids_after[2].startswith("toolu_") and ids_after[3].startswith("functions.")
    assert len({t[0]["function"]["name"] for t in turns[1:3]}) == 2
    assert [m["role"] for m in messages].count("user") == 2
    single = sweep_ids(SearchSpace(parallel=False)).messages
    assert all(len(m["tool_calls"]) == 1 for m in single if m.get("tool_calls"))


def test_the_turns_sweep_plays_assistant_messages_in_a_row_as_loops_write_them() -> None:
    """``sweep_turns``: a text alone then a call, once for each whitespace edge at its end, one line or two; four in
    a row (a text ending with ':', the longest text, another, a turn of two calls with an empty text); an answer then
    another that goes on from it, then a user turn; a call with text (its arguments a JSON string where the template
    renders one) then another call, both results after them. The sweep of values answers every other call by its id
    alone and gives every third result a framework's key; the sweep of texts answers some with neither id nor name."""
    space = SearchSpace(reasoning=True, string_arguments=True)
    messages = sweep_turns(space).messages
    roles = "".join(m["role"][0] for m in messages)  # u, a, t(ool)
    pairs = list(itertools.pairwise(messages))
    edged = [
        a["content"] for a, b in pairs if b.get("tool_calls") and a["content"] and a["content"].strip() in CALL_TEXTS
    ]
    assert len(edged) == len(EDGES) - 1
    assert {t[len(t.rstrip()) :] for t in edged} == set(EDGES[1:]) and any("\n" in t.strip() for t in edged)
    assert all(t == t.lstrip() for t in edged)  # a text starting with a line end may join the generation prompt's
    run = messages[roles.index("aaaa") : roles.index("aaaa") + 4]
    assert run[0]["content"].endswith(":") and run[1]["content"] == max(space.texts, key=len)
    assert run[3]["content"] == "" and len(run[3]["tool_calls"]) == 2
    answers = [
        (a, b)
        for a, b in pairs
        if a["role"] == b["role"] == "assistant" and not (a.get("tool_calls") or b.get("tool_calls"))
    ]
    *_, (first, then) = answers  # the last pair: an answer, then another (the others stand before a call)
    assert then["content"].startswith(first["content"]) and messages[messages.index(then) + 1]["role"] == "user"
    (calls_then_calls,) = [(a, b) for a, b in pairs if a.get("tool_calls") and b.get("tool_calls")]
    assert calls_then_calls[0]["content"] and isinstance(
        calls_then_calls[0]["tool_calls"][0]["function"]["arguments"], str
    )
    ids = [c["id"] for turn in calls_then_calls for c in turn["tool_calls"]]
    after = messages.index(calls_then_calls[1]) + 1
    assert [m.get("tool_call_id") for m in messages[after : after + 2]] == ids
    assert all(m.get("reasoning_content") for m in messages if m["role"] == "assistant")
    single = sweep_turns(SearchSpace(parallel=False)).messages
    assert all(len(m["tool_calls"]) == 1 for m in single if m.get("tool_calls"))
    assert all(isinstance(c["function"]["arguments"], dict) for m in single for c in m.get("tool_calls") or [])
    # every name shape stands in a result's name (red team 18's c9: an MCP name read from the last result, whose
    # result had gone unnamed), and results answered by the call's id alone stand there too
    results = [m for m in sweep(SearchSpace()).messages if m["role"] == "tool"]
    assert set(NAME_SHAPES) <= {m.get("name") for m in results}
    assert any("name" not in m and "tool_call_id" in m for m in results)
    assert any(m.get("status") == "success" for m in results)
    texts = [m for m in sweep_texts(SearchSpace()).messages if m["role"] == "tool"]
    assert any("name" not in m and "tool_call_id" not in m for m in texts)


def test_a_larger_search_draws_more_never_fewer() -> None:
    """``--search 100`` on the plain template draws its hundred (f22175c: it stopped after 43 draws on its share
    of the characters, where one of 40 drew its 40; red team 10 saw it at 200) and stays a clean SAFE."""
    r = audited("base", search=100)
    search = r.scenarios["search"]
    assert search["drawn"] == 100 and "stopped" not in search, search
    assert r.verdict == "safe" and not r.scenarios.get("not_probed"), r.scenarios.get("not_probed")


def test_the_sweeps_are_the_first_conversations_of_the_budget() -> None:
    """A budget of one plays the first sweep only; forty play the six sweeps and thirty-four draws."""
    one = audited("base", search=1).scenarios["search"]
    assert one["drawn"] == 1 and one["counterexamples"] == []
    full = audited("base").scenarios["search"]
    assert full["drawn"] == 40


def test_two_assistant_messages_in_a_row_are_played_as_the_loop_plays_them() -> None:
    """The counterexample of assistant_turns_merged: the call turn after a text turn is sampled after the generation
    prompt (its calls are the model's, none dropped), and only the re-render breaks."""
    r = audited("assistant_turns_merged")
    finding = counterexample(r, "naive_rerender")
    found = next(c for c in r.scenarios["search"]["counterexamples"] if c["scenario"] == finding.scenario)
    roles = [m["role"] for m in found["messages"]]
    assert any(a == b == "assistant" for a, b in itertools.pairwise(roles))
    assert r.check("tool_support").findings == [] and r.check("tool_append_prefix").findings == []


def test_a_sweep_the_template_renders_but_no_comparison_can_judge_is_named(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A sweep whose turn starts inside a token (a seam: no canonical sample) is played but not judged; it is named
    ``search:unjudged:NAME`` (the SAFE is then not clean), never counted as holding. Here the turns sweep is made
    unjudged by hand: no bundled or shared model's sweep has a seam."""
    from tito_audit import audit_model, load
    from tito_audit.audit.search import run
    from tito_audit.audit.search.result import SearchResult

    real = run.judged

    def judged(played):  # type: ignore[no-untyped-def]
        texts = [m.get("content") for m in played.simulation.messages]
        return real(played) and "Two things to check:" not in texts

    monkeypatch.setattr(run, "judged", judged)
    r = audit_model(load(TOKENIZER, chat_template_file=str(TEMPLATES / "base.jinja")))  # not audit_of's: not cached
    assert r.verdict == "safe" and "search:unjudged:turns" in r.scenarios["not_probed"]
    assert r.scenarios["search"]["unjudged"] == ["turns"]
    assert SearchResult(40, 0, ("append",), unjudged=("turns",)).not_probed() == ["search:unjudged:turns"]
    from tito_audit.audit.search.sweep import SWEEP_NAMES, sweeps

    assert len(SWEEP_NAMES) == len(sweeps(SearchSpace()))  # a name for every sweep, in order
