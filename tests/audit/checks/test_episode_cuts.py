"""An episode that reaches its turn limit right after the loop appended tool results (or a user turn, a notice) ends
on them, and naive trainer code re-renders it without a generation prompt. A template that writes the history
differently in that render only (``messages[-1].role == 'tool' and not add_generation_prompt``) was SAFE on 48827d0:
every episode played ended on an answer (red teams 16 and 17, c8L and H2). ``naive_rerender`` now cuts each exact
episode after each appended block and compares the history before it (``audit.episode_cuts``).

The templates (tests/data/templates/cuts/) are ChatML with tools on Qwen2.5's tokenizer."""

from __future__ import annotations

import pytest

from tests.conftest import DATA, audit_of
from tito_audit import load
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.audit.episode_cuts import cut_ids, cuts
from tito_audit.audit.search.property import RERENDER, kind_of
from tito_audit.audit.search.space import SearchSpace
from tito_audit.audit.search.sweep import sweep_answers

CUTS = DATA / "templates" / "cuts"
MODEL = "qwen2.5-7b-instruct"


def _cut_findings(report):  # type: ignore[no-untyped-def]
    return [f for f in report.check("naive_rerender").findings if " cut after message " in f.scenario]


def test_a_history_rewritten_only_when_the_episode_ends_on_results_is_tito_required() -> None:
    report = audit_of(MODEL, CUTS / "compact_calls_when_cut.jinja", search=0)
    assert report.verdict == "tito-required", report.verdict_reasons
    assert "tito-required:naive_rerender" in report.verdict_reasons
    found = _cut_findings(report)
    assert found, report.check("naive_rerender").summary
    # the rewrite is in the history (a call's JSON), before the results the cut ends on, and it moves trained tokens
    assert all(f.affected_trainable > 0 for f in found)
    summary = report.check("naive_rerender").summary  # every whole episode is exact, cuts are not
    assert summary.startswith("diverges in 0 of ") and f" and in {len(found)} of " in summary, summary


def test_a_rewrite_while_a_user_turn_or_a_notice_ends_the_episode_is_found_too() -> None:
    report = audit_of(MODEL, CUTS / "compact_calls_when_a_notice_ends_it.jinja", search=0)
    assert report.verdict == "tito-required", report.verdict_reasons
    assert _cut_findings(report)


def test_a_rewrite_when_a_notice_ends_the_episode_after_its_answer_is_tito_required() -> None:
    """Red team 18's e2: a loop that appends "Turn limit reached." after the final answer, and a trainer that
    re-renders that list without a generation prompt. No scenario ends so: each exact episode with a call is ended by
    each message a loop appends to say something (``episode_cuts.endings``)."""
    report = audit_of(MODEL, CUTS / "compact_calls_when_a_notice_follows_the_answer.jinja", search=0)
    assert report.verdict == "tito-required", report.verdict_reasons
    ended = [f.scenario for f in report.check("naive_rerender").findings]
    assert ended and all(s.endswith("ended by a system message") for s in ended), ended


def test_a_rewrite_keyed_on_an_error_in_the_last_result_is_found_by_the_sweeps_cuts() -> None:
    """Red team 18's a2: the rewrite lasts while the episode ends on a result that reports an error, a value no
    catalogue scenario sends and the code hides. The sweep of texts returns each text core as a result (an error,
    upper and lower case, among them) and is judged cut after each block; the draws after their last only."""
    report = audit_of(MODEL, CUTS / "compact_calls_when_cut_after_an_error.jinja")
    assert report.verdict == "tito-required", report.verdict_reasons
    (found, *_) = report.scenarios["search"]["counterexamples"]
    assert found["kind"] == "rerender" and "error" in found["messages"][-2]["content"].lower(), found
    without = audit_of(MODEL, CUTS / "compact_calls_when_cut_after_an_error.jinja", search=0)
    assert without.verdict == "safe", without.verdict_reasons


def test_what_follows_the_results_is_not_compared() -> None:
    """Control: without a generation prompt the template closes the episode with a line of its own after the
    results; the history is as sampled, so the verdict stays SAFE and the cuts are counted as compared."""
    report = audit_of(MODEL, CUTS / "closing_line_when_cut.jinja", search=0)
    assert report.verdict == "safe", report.verdict_reasons
    check = report.check("naive_rerender")
    assert check.status == "pass" and check.data["cuts"] > 0
    assert f"and {check.data['cuts']} ended at messages the loop appended" in check.summary


def test_cuts_end_on_each_appended_block_and_keep_the_buffer_before_it() -> None:
    """Every cut ends on a message the loop appended (never on an assistant turn: a generation prompt alone between
    two assistant turns is no place a loop stops) and its history is the buffer up to that block; the template
    without the rewrite re-renders that history exactly."""
    model = load(MODEL, chat_template_file=str(CUTS / "closing_line_when_cut.jinja"))
    ctx = AuditContext(model, AuditOptions(search=0))
    seen = 0
    for sim in ctx.ok_simulations():
        traj = sim.trajectory
        assert traj is not None
        starts = {s.start for s in traj.segments if s.kind == "bridge"}
        for cut in cuts(sim):
            seen += 1
            assert sim.messages[cut.messages - 1]["role"] != "assistant"
            assert cut.messages < len(sim.messages) and cut.history in starts
            if "special_text" not in sim.scenario.tags:
                assert cut_ids(ctx.renderer, sim, cut)[: cut.history] == traj.input_ids[: cut.history]
    assert seen > 10


def test_a_rewrite_while_the_episode_ends_at_an_answer_that_reports_an_error_is_found_by_the_sweeps() -> None:
    """Red team 18's c7: the rewrite lasts while the last message is an answer that reports an error (a rollout ends
    where the model answers without a call) and no generation prompt follows, a value no catalogue scenario's answer
    holds and the code hides. The sweep of answers plays each text core as an answer that more messages follow: the
    simulator renders each answer as the last message without a generation prompt (the episode ended there: the
    render that gives its sampled turn), and the append after it, or the re-render, shows the rewrite. Without the
    search it is SAFE."""
    name = "compact_calls_when_the_answer_reports_an_error.jinja"
    report = audit_of(MODEL, CUTS / name)
    assert report.verdict == "tito-required", report.verdict_reasons
    assert "tito-required:naive_rerender" in report.verdict_reasons
    (found, *_) = report.scenarios["search"]["counterexamples"]
    _from_the_sweep_of_answers(found)
    answers = [m for m in found["messages"] if m["role"] == "assistant" and not m.get("tool_calls")]
    assert found["kind"] == "rerender" and any("error" in (m["content"] or "").lower() for m in answers), found
    assert audit_of(MODEL, CUTS / name, search=0).verdict == "safe"


def test_a_rewrite_while_a_user_turn_reports_an_error_is_found_by_the_sweep_of_answers() -> None:
    """Red team 18's c11: while the last message is a user turn that reports an error (the loop appends it with the
    generation prompt), every call before it is written otherwise. The sweep of answers sends each text core as a
    user turn after an answer; ``history_rewrite`` judges that append."""
    name = "compact_calls_while_a_user_turn_reports_an_error.jinja"
    report = audit_of(MODEL, CUTS / name)
    assert report.verdict == "tito-required", report.verdict_reasons
    assert any(f.scenario.startswith("search/") for f in report.check("history_rewrite").findings)
    (found, *_) = report.scenarios["search"]["counterexamples"]
    _from_the_sweep_of_answers(found)
    users = [m["content"] for m in found["messages"][1:] if m["role"] == "user"]
    assert any("error" in u.lower() for u in users), found
    assert audit_of(MODEL, CUTS / name, search=0).verdict == "safe"


def test_a_rewrite_while_the_last_result_carries_an_mcp_name_is_found_by_the_sweep_of_values() -> None:
    """Red team 18's c9: the episode cut after the result of an MCP tool (``mcp__server__tool``, a name the result
    carries) is re-rendered otherwise. The sweep of values names each name shape's first result, so every shape
    stands in one: the first conversation of the budget finds it (a budget of one plays that sweep alone; before,
    the MCP call's result went unnamed, and only a draw that happened to pair the name with an ending found it)."""
    name = "compact_calls_when_cut_after_an_mcp_result.jinja"
    for report in (audit_of(MODEL, CUTS / name, search=1), audit_of(MODEL, CUTS / name)):
        assert report.verdict == "tito-required", report.verdict_reasons
        (found, *_) = report.scenarios["search"]["counterexamples"]
        assert any("__" in (m.get("name") or "") for m in found["messages"] if m["role"] == "tool"), found
    assert audit_of(MODEL, CUTS / name, search=0).verdict == "safe"


@pytest.mark.parametrize(
    "name",
    ["control_user_turns_that_report_an_error_marked_alike", "control_answers_that_report_an_error_marked_alike"],
)
def test_a_turn_that_reports_an_error_marked_on_every_render_stays_safe(name: str) -> None:
    """Controls: the same marker on a user turn, or an answer, that reports an error, whatever follows it."""
    from tests.audit.search.qwen_rewrites import assert_clean_safe

    assert_clean_safe(audit_of(MODEL, CUTS / f"{name}.jinja"))


def _from_the_sweep_of_answers(found: dict) -> None:  # type: ignore[type-arg]
    """The counterexample is the sweep of answers' (its tool cycle, as it opens), shrunk: not a draw's."""
    sweep = sweep_answers(SearchSpace()).messages
    assert [m.get("content") for m in found["messages"][:3]] == [m.get("content") for m in sweep[:3]], found
    assert found["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"


def test_the_search_counts_a_cut_that_rewrites_the_history_as_a_rerender_break() -> None:
    """A conversation the search draws breaks the property where a cut of it does, though its full re-render is
    exact (a rewrite keyed on a value only a draw holds would otherwise be played and passed over)."""
    for name, broken in (("compact_calls_when_cut.jinja", True), ("closing_line_when_cut.jinja", False)):
        ctx = AuditContext(load(MODEL, chat_template_file=str(CUTS / name)), AuditOptions(search=0))
        exact = [s for s in ctx.ok_simulations(exclude_tags=("special_text",)) if cuts(s)]
        assert exact and all(s.trajectory is not None and s.trajectory.input_ids == s.naive_ids for s in exact)
        kinds = {kind_of(ctx, s) for s in exact}  # the rewrite needs a cut that ends on results: not every one does
        assert (RERENDER in kinds) if broken else kinds == {None}, (name, kinds)
