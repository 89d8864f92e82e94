"""tool_call_serialization counts what it compared (issue 33 item 2): a form it could not compare is named as not
compared, a check that compared no form is not applicable, and the drift of the JSON a model is likely to sample
(json.dumps spacing, compact separators, another key order, escaped non-ASCII) is measured as a rate."""

from __future__ import annotations

import pytest

from tests.conftest import DATA as TEST_DATA
from tito_audit import audit_model, load
from tito_audit.audit.context import AuditOptions

DATA = TEST_DATA / "serialization"
ONLY = AuditOptions(only_checks=("tool_call_serialization",))


def _check(model):
    report = audit_model(model, ONLY)
    return report, report.check("tool_call_serialization")


def test_a_tojson_template_is_compared_for_every_likely_form(loaded) -> None:
    """Qwen2.5 writes `arguments | tojson`: a model sampling compact JSON is re-serialized with spaces."""
    _, c = _check(loaded("Qwen/Qwen2.5-7B-Instruct"))
    assert c.data["template_form"] == "spaced"
    assert c.data["forms_compared"] == 4 and not c.data["forms_not_compared"]
    assert {"compact separators", "reversed key order"} <= set(c.data["drifted_forms"])
    assert c.status == "warn" and c.summary.startswith("drift rate 3/4")
    windows = [f for f in c.findings if f.index is not None]
    assert windows and all(f.rate == c.data["drift_rate"] == 0.75 for f in windows)


def test_a_compact_tojson_template_drifts_spaced_samples() -> None:
    _, c = _check(load("qwen2.5-7b-instruct", chat_template_file=str(DATA / "tojson_compact.jinja")))
    assert c.data["template_form"] == "compact separators"
    assert "spaced" in c.data["drifted_forms"] and "compact separators" not in c.data["drifted_forms"]


@pytest.mark.parametrize("spec", ["microsoft/Phi-3-mini-4k-instruct", "deepseek-ai/DeepSeek-V3"])
def test_a_template_that_writes_no_json_compares_no_form_and_does_not_pass(loaded, spec: str) -> None:
    """Phi-3 renders no call; DeepSeek-V3 (transformers 5) none in its canonical form: nothing was compared."""
    _, c = _check(loaded(spec))
    assert c.status == "not_applicable" and c.comparisons == 0
    assert "no JSON form compared" in c.summary and set(c.data["forms_not_compared"]) == {
        "spaced",
        "compact separators",
        "reversed key order",
        "ascii escapes",
    }


def test_safe_says_what_it_covers(loaded) -> None:
    report = audit_model(loaded("Qwen/Qwen2.5-7B-Instruct"))
    assert report.verdict == "safe"
    assert "template's own formats" in report.verdict_explanation
    assert "rates" in report.verdict_explanation
