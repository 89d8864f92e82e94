"""The verdict is earned as a plain `apply_chat_template` loop renders; where a loop that marks control-token text
(`sanitize_control_tokens=True`) would get another answer, both are reported (issue 40, class 2). The templates
test `content.startswith('<think>')`, which marking turns false (`<think>` is wrapped in private-use markers)."""

from __future__ import annotations

from tests.conftest import DATA, audit_of
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.sources.load import load

MARKING = DATA / "marking"
THINK_ID = 151667  # Qwen3's `<think>`: one added token


def test_a_template_that_drops_leading_reasoning_from_history_is_unsafe_as_a_plain_loop_sees_it() -> None:
    """Reasoning that leads an assistant turn (`<think>...</think>` first) is dropped once a message follows: a
    plain loop's history is rewritten on every tool append (unsafe). Marked, the test never matches and buffer +
    delta stays exact: that answer is reported as resting on marking."""
    report = audit_of("qwen3-0.6b", MARKING / "think_first_dropped.jinja")
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    assert "avoid:only_without_marking" in report.verdict_reasons
    marking = report.check("control_marking")
    assert {f.reason for f in marking.findings} == {"only_without_marking"}
    assert all("exact only with control-token marking" in f.message for f in marking.findings)


def test_a_template_that_drops_only_misplaced_reasoning_is_safe_as_a_plain_loop_sees_it() -> None:
    """Reasoning written anywhere but first is dropped once a message follows; a model writes it first, so a plain
    loop's history is never rewritten (safe). Marked, `startswith('<think>')` is false and the leading block is
    dropped: the break is reported as one of marking's, not the verdict's. The arm that drops misplaced reasoning
    is one no played conversation takes (a plain loop's content never holds reasoning after text): template
    coverage names it, so this SAFE is not a clean pass (exit 3 unless --allow-not-probed)."""
    report = audit_of("qwen3-0.6b", MARKING / "think_elsewhere_dropped.jinja")
    assert report.verdict == "safe", report.verdict_reasons
    marking_reason, *gaps = report.verdict_reasons
    assert marking_reason == "avoid:only_with_marking"
    assert len(gaps) == 1 and gaps[0].startswith("not_probed:template_line:7: "), gaps
    assert report.check("tool_append_prefix").status == "pass"
    marking = report.check("control_marking")
    assert marking.findings and {f.reason for f in marking.findings} == {"only_with_marking"}


def test_sampled_reasoning_is_one_control_token_in_the_buffer() -> None:
    """The simulated model emits `<think>` as the one token its vocabulary holds, and the plain re-render of the
    episode encodes it the same way: buffer and re-render agree token for token."""
    ctx = AuditContext(
        load("qwen3-0.6b", chat_template_file=str(MARKING / "think_elsewhere_dropped.jinja")),
        AuditOptions(scenarios="quick"),
    )
    [sim] = [s for s in ctx.ok_simulations() if s.scenario.id == "inline_think/plain"]
    assert all(t.sampled_ids[0] == THINK_ID for t in sim.turns)
    assert sim.trajectory is not None and list(sim.trajectory.input_ids) == sim.naive_ids
    assert sim.trajectory.input_ids.count(THINK_ID) == 2
