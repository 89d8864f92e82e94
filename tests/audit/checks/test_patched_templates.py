"""Checks on real templates with one realistic bug introduced, to pin what each finding says."""

from __future__ import annotations

from tito_audit import audit_model


def test_a_fork_that_renders_only_the_first_parallel_call_is_named(loaded):
    base = loaded("Qwen/Qwen2.5-7B-Instruct")
    template = base.chat_template
    assert "{%- for tool_call in message.tool_calls %}" in template
    forked = base.with_template(
        template.replace(
            "{%- for tool_call in message.tool_calls %}", "{%- for tool_call in message.tool_calls[:1] %}"
        ),
        "first-call-only fork",
    )
    report = audit_model(forked)
    findings = report.check("tool_forms").findings  # a drop confined to parallel calls: the form to avoid
    partial = [f.message for f in findings if "parallel tool call" in f.message]
    assert partial, [f.message for f in findings]
    assert "#2 (" in partial[0] and "of 2" in partial[0]
    assert report.check("tool_support").status == "pass"
    # the verdict stands (re-rendering a parallel turn loses the second call: tito-required), with the warning
    assert report.verdict == "tito-required" and "avoid:parallel_calls" in report.verdict_reasons
    assert audit_model(base).check("tool_forms").status == "pass"


def test_forged_control_tokens_are_the_templates_own(report):
    c = report("Qwen/Qwen2.5-7B-Instruct").check("special_token_injection")
    assert c.status == "warn"
    assert "<|im_end|>" in c.findings[0].message and "forged control token" in c.findings[0].message
