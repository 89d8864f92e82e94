"""tool_append_prefix judges tool results only: a system or user message appended after them, or instead of them,
is append_matrix's concern (issue 40, class 7), also where the template needs tool results as user turns."""

from __future__ import annotations

from tests.conftest import DATA

TEMPLATE = DATA / "appends" / "system_to_preamble_drops_tools.jinja"


def _check(report, check_id: str):  # type: ignore[no-untyped-def]
    return next(c for c in report.checks if c.id == check_id)


def test_a_system_append_after_adapted_tool_results_is_not_a_tool_append_break() -> None:
    """A Cohere2-style template without tools (TRL's `cohere2.jinja` is one): tool results are played as user turns
    (roles must alternate), and the first system message, wherever it stands, moves into the preamble. In
    `system_notice` the block after the call is the adapted tool result, then a system notice: the notice rewrites
    the preamble. Appending the result alone preserves the prefix, so tool_append_prefix passes and the system
    append is named by append_matrix; the verdict stays unsafe for the tool calls the template drops."""
    report = _audit_text(TEMPLATE.read_text(encoding="utf-8"))
    appends = _check(report, "tool_append_prefix")
    assert appends.status == "pass", [f.message for f in appends.findings]
    assert appends.comparisons > 0
    matrix = _check(report, "append_matrix")
    assert any(f.scenario.startswith("append/system/") for f in matrix.findings), matrix.summary
    assert "unsafe:rewrites_on_tool_append" not in report.verdict_reasons
    assert report.verdict == "unsafe" and "unsafe:drops_tool_calls" in report.verdict_reasons


def test_a_tool_result_played_as_a_user_turn_that_rewrites_the_history_still_fails() -> None:
    """The same template, where an adapted tool result itself rewrites the history (a user message after the first
    one is copied into the preamble too, as the system message is): the break stays tool_append_prefix's, named
    after the tool result's message as played (a user turn)."""
    first_system = "{% if message.role == 'system' %}{% set ns.system_prompt"
    also_later_user = "{% if message.role == 'system' or (message.role == 'user' and not loop.first) %}"
    text = TEMPLATE.read_text(encoding="utf-8").replace(first_system, also_later_user + "{% set ns.system_prompt")
    report = _audit_text(text)
    appends = _check(report, "tool_append_prefix")
    assert appends.status == "fail", appends.summary
    assert any("appending user after assistant message" in f.message for f in appends.findings), appends.findings


def _audit_text(text: str):  # type: ignore[no-untyped-def]
    """The audit of ``text`` on a tokenizer with its control tokens (Qwen2.5's, synthesized: as
    `tito-audit audit qwen2.5-7b-instruct --chat-template FILE` does)."""
    from tito_audit import audit_model, load
    from tito_audit.audit.context import AuditOptions
    from tito_audit.sources.synthesized import on_its_control_tokens

    model = load("qwen2.5-7b-instruct").with_template(text, "template.jinja")
    return audit_model(on_its_control_tokens(model), AuditOptions(scenarios="quick"))
