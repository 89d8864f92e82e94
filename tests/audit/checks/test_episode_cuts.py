"""An episode that reaches its turn limit right after the loop appended tool results (or a user turn, a notice) ends
on them, and naive trainer code re-renders it without a generation prompt. A template that writes the history
differently in that render only (``messages[-1].role == 'tool' and not add_generation_prompt``) was SAFE on 48827d0:
every episode played ended on an answer (red teams 16 and 17, c8L and H2). ``naive_rerender`` now cuts each exact
episode after each appended block and compares the history before it (``audit.episode_cuts``).

The templates (tests/data/templates/cuts/) are ChatML with tools on Qwen2.5's tokenizer."""

from __future__ import annotations

from tests.conftest import DATA, audit_of
from tito_audit import load
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.audit.episode_cuts import cut_ids, cuts
from tito_audit.audit.search.property import RERENDER, kind_of

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


def test_the_search_counts_a_cut_that_rewrites_the_history_as_a_rerender_break() -> None:
    """A conversation the search draws breaks the property where a cut of it does, though its full re-render is
    exact (a rewrite keyed on a value only a draw holds would otherwise be played and passed over)."""
    for name, broken in (("compact_calls_when_cut.jinja", True), ("closing_line_when_cut.jinja", False)):
        ctx = AuditContext(load(MODEL, chat_template_file=str(CUTS / name)), AuditOptions(search=0))
        exact = [s for s in ctx.ok_simulations(exclude_tags=("special_text",)) if cuts(s)]
        assert exact and all(s.trajectory is not None and s.trajectory.input_ids == s.naive_ids for s in exact)
        kinds = {kind_of(ctx, s) for s in exact}  # the rewrite needs a cut that ends on results: not every one does
        assert (RERENDER in kinds) if broken else kinds == {None}, (name, kinds)
