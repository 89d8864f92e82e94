"""Red teams 16 and 17: rewrites of the history that last only while a system or user message appended with tool
results, or after an answer, is the last message.

Each template (``tests/data/search/appends/``) writes every call's JSON compactly while a system notice (or a user
turn) that a loop appended with tool results ends the conversation. The final re-render, where that message is no
longer last, is as the buffer holds it, so ``naive_rerender`` and the turn-by-turn comparison of ``history_rewrite``
saw nothing, and ``tool_append_prefix`` leaves a block whose tool results alone keep the prefix: each was a clean
SAFE (exit 0) on 6ea8c29, with plain ``apply_chat_template`` showing the break (the prompt a loop renders after the
notice is not the buffer's history). ``history_rewrite`` now judges every append a scenario made where its turns
render alike, and the search counts such a break as a re-render break and draws a user turn or a notice right after
a call turn's results (the catalogue's ``system_notice`` plays the notice; no scenario plays the user turn).
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe
from tests.audit.search.qwen_rewrites import audited as qwen_rewrite
from tests.conftest import DATA, audit_of
from tito_audit import load
from tito_audit.audit.checks.tool_append_prefix import _tool_append, judged_appends
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.audit.search.property import RERENDER, kind_of
from tito_audit.audit.search.space import AFTER_RESULTS, after_results
from tito_audit.audit.simulation import simulate
from tito_audit.scenarios.searched import Conversation

APPENDS = DATA / "search" / "appends"


def audited(name: str):  # type: ignore[no-untyped-def]
    return qwen_rewrite(APPENDS, name)


def _while_last(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [f.message for f in report.check("history_rewrite").findings if "while it is last" in f.message]


@pytest.mark.parametrize(
    "name",
    [
        "call_json_compacted_while_a_notice_follows_results",
        "call_json_compacted_while_a_notice_follows_results_lookup",
        "call_json_compacted_while_a_system_message_is_last",
    ],
)
def test_a_rewrite_while_a_notice_is_last_makes_the_buffer_required(name: str) -> None:
    r = audited(name)
    assert r.verdict == "tito-required", r.verdict_reasons
    assert "tito-required:rewrites_on_append" in r.verdict_reasons
    assert any("system after assistant message" in m for m in _while_last(r)), _while_last(r)


def test_a_rewrite_while_a_user_turn_follows_results_is_found_by_the_search() -> None:
    """No catalogue scenario appends a user turn with tool results: the search draws one, and its counterexample holds
    a tool result and the user turn right after it."""
    r = audited("call_json_compacted_while_a_user_follows_results_lookup")
    assert r.verdict == "tito-required", r.verdict_reasons
    (found, *_) = r.scenarios["search"]["counterexamples"]
    roles = [m["role"] for m in found["messages"]]
    assert any(a == "tool" and b == "user" for a, b in pairwise(roles)), roles
    assert any(f.scenario.startswith("search/") for f in r.check("history_rewrite").findings)
    without = audit_of(MODEL, APPENDS / "call_json_compacted_while_a_user_follows_results_lookup.jinja", search=0)
    assert without.verdict == "safe", without.verdict_reasons


@pytest.mark.parametrize(
    ("name", "probe"),
    [
        ("answer_rewritten_while_a_notice_follows_it", "append/system/after_answer[default]"),
        ("answers_rewritten_while_a_user_turn_is_last_in_chat", "append/user/after_answer[default]"),
    ],
)
def test_a_rewrite_while_an_append_after_an_answer_is_last_makes_the_buffer_required(name: str, probe: str) -> None:
    """Red team 17: a notice or a user turn appended after an answer (no tool result in the block, no scenario that
    plays it whole): append_matrix's probes showed the rewrite, with no role in the verdict; history_rewrite reads
    them now."""
    r = audited(name)
    assert r.verdict == "tito-required", r.verdict_reasons
    assert probe in {f.scenario for f in r.check("history_rewrite").findings}


def test_a_notice_marked_when_it_follows_results_stays_a_clean_safe() -> None:
    """The control: the notice itself is written otherwise after a tool result, the history never: nothing to find."""
    assert_clean_safe(audited("control_notice_after_results_marked"))
    assert_clean_safe(audited("control_answers_end_with_a_line_end_everywhere"))


def test_after_results_puts_the_message_in_the_results_append() -> None:
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "tool_calls": [{}, {}]},
        {"role": "tool", "content": "a"},
        {"role": "tool", "content": "b"},
        {"role": "assistant", "content": "Done."},
    ]
    out = after_results(messages, "user")
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert out[4]["content"] == AFTER_RESULTS["user"]
    assert after_results(messages[:2], "system") == messages[:2]  # no results: nothing to follow


def test_a_rewrite_while_an_appended_developer_message_is_last_makes_the_buffer_required() -> None:
    """Red team 17's D and 18's a3: the draws sent a role the template names (OpenAI's developer) only after the first
    user turn, and no probe appended one: clean SAFEs on 48827d0. append_matrix's probes now append one after an
    answer and after a call where the template names and renders the role, and history_rewrite reads them."""
    r = audited("call_json_compacted_while_a_developer_message_is_last")
    assert r.verdict == "tito-required", r.verdict_reasons
    probes = {f.scenario for f in r.check("history_rewrite").findings}
    assert "append/developer/after_call[default]" in probes, probes  # (after an answer no call is there to rewrite)
    assert_clean_safe(audited("control_developer_messages_rendered_alike"))


def test_a_rewrite_while_a_developer_message_follows_results_is_found_by_the_sweep() -> None:
    """Red team 18's c12: a developer message appended with tool results (no probe appends one after a result, and the
    draws met it at one seed and missed it at another): the sweep of texts appends each message the template renders
    after results (a user turn, a notice, a developer message) with its first cycles' results."""
    r = audited("call_json_compacted_while_a_developer_message_follows_results")
    assert r.verdict == "tito-required", r.verdict_reasons
    (found, *_) = r.scenarios["search"]["counterexamples"]
    roles = [m["role"] for m in found["messages"]]
    assert any(a == "tool" and b == "developer" for a, b in pairwise(roles)), roles
    without = audit_of(MODEL, APPENDS / "call_json_compacted_while_a_developer_message_follows_results.jinja", search=0)
    assert without.verdict == "safe", without.verdict_reasons


def test_a_rewrite_while_a_developer_message_follows_a_later_user_turn_is_found_by_the_search() -> None:
    """Red team 18's e4: a developer message appended with a user turn after an answer (no probe appends the two); the
    draws put one after a user turn they pick, not only the first."""
    r = audited("call_json_compacted_while_a_developer_message_follows_a_user_turn")
    assert r.verdict == "tito-required", r.verdict_reasons
    (found, *_) = r.scenarios["search"]["counterexamples"]
    roles = [m["role"] for m in found["messages"]]
    assert any(a == "user" and b == "developer" for a, b in pairwise(roles[2:])), roles
    without = audit_of(
        MODEL, APPENDS / "call_json_compacted_while_a_developer_message_follows_a_user_turn.jinja", search=0
    )
    assert without.verdict == "safe", without.verdict_reasons


def test_the_append_after_the_turn_sampled_off_a_rewritten_prompt_is_not_judged() -> None:
    """Red team 18's e4: after a [system, user, developer] block the template rewrote (developer last), the next
    turn's sampled ids are read off that rewritten prompt, and the append after that turn showed "the template writes
    the stop token inside the assistant turn": an append break, UNSAFE, that the same conversation does not show on
    Qwen2.5's own template. ``judged_appends`` skips that append; the notice's rewrite stays history_rewrite's."""
    folder = APPENDS / "cascade"
    conversation = Conversation.from_dict(json.loads((folder / "conversation.json").read_text()))

    def played(template: Path | None):  # type: ignore[no-untyped-def]
        model = load(MODEL, chat_template_file=str(template)) if template else load(MODEL)
        ctx = AuditContext(model, AuditOptions(search=0))
        return ctx, simulate(ctx.renderer, conversation.scenario("x"), ctx.stop_ids, ctx.shapes)

    ctx, sim = played(folder / "developer_after_a_user_turn.jinja")
    (first, _), (second, error) = sim.bridge_errors
    assert _tool_append(ctx, sim, first, sim.bridge_errors[0][1])[1] is None  # the developer message's rewrite
    assert _tool_append(ctx, sim, second, error)[1] is not None  # what the next turn's append showed
    assert [idx for idx, *_ in judged_appends(ctx, sim)] == [first]
    assert kind_of(ctx, sim) == RERENDER
    assert played(None)[1].bridge_errors == []  # the template's own rendering of the same conversation: no break
