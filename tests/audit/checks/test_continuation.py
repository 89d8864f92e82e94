"""Continuing an unterminated assistant turn (issue 32): a cut answer, or a prefill, continued by re-rendering it
with continue_final_message must give back the turn's prompt and the ids sampled so far."""

from __future__ import annotations

import pytest

from tests.conftest import DATA as TEST_DATA
from tests.conftest import SHARED_MODELS
from tito_audit import audit_model, load
from tito_audit.audit.context import AuditOptions

DATA = TEST_DATA / "continuation"
ONLY = AuditOptions(only_checks=("continuation",))


def test_a_prefill_the_finished_turn_does_not_write_is_lost_when_continuing() -> None:
    report = audit_model(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / "prefill_think.jinja")))
    c = report.check("continuation")
    assert c.status == "warn" and c.comparisons >= 1
    first = c.findings[0]
    assert first.cls == "generation_prompt" and first.reason == "continue_final_message"
    assert "<think>" in "".join(first.expected.tokens) and "<think>" not in "".join(first.actual.tokens)
    assert "avoid:continue_final_message" in report.verdict_reasons


@pytest.mark.parametrize("spec", SHARED_MODELS)
def test_the_shared_models_continue_a_cut_answer_from_the_buffer(loaded, spec: str) -> None:
    """A cut inside an answer continues from the buffer on every shared model. A cut inside reasoning does not on
    Qwen3 (its template closes the think block after the reasoning it is given, and writes an empty block before
    raw content: checked by hand with apply_chat_template in the red team's verify.py t4q), nor on gpt-oss (the
    re-render of the turn being continued drops the analysis of the earlier call turn, which the buffer holds; and
    the template refuses channel tags in content)."""
    c = audit_model(loaded(spec), ONLY).check("continuation")
    assert c.comparisons >= 1, c.summary
    assert not [f for f in c.findings if "in its answers" in f.message], c.summary
    if spec in ("Qwen/Qwen3-0.6B", "openai/gpt-oss-20b"):
        assert c.status == "warn" and all("in its reasoning" in f.message for f in c.findings), c.summary
    else:
        assert c.status == "pass", c.summary
