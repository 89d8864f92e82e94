"""A render that fails is counted against the check, and a failure of ours is never the template's (issue 33
item 3): an exception raised outside the template's code (a TypeError inside a library API, our own code) makes
the check that reached it ``error`` (exit 3), never "not applicable" or a template fault; a check whose failed
renders outnumber its comparisons cannot pass."""

from __future__ import annotations

import pytest

from tito_audit import audit_model, load
from tito_audit.audit.checks.base import CheckSpec, run_check
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.cli.audit import exit_code
from tito_audit.errors import RenderError
from tito_audit.rendering.renderer import Renderer
from tito_audit.report.findings import Outcome
from tito_audit.report.model_report import AuditReport

MODEL = "qwen2.5-7b-instruct"


def test_a_type_error_inside_a_library_api_is_a_check_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transformers release whose encoding helper raises TypeError turned special_token_injection into "not
    applicable: no special-token scenario renders with this template"; it is the check's error, exit 3."""
    model = load(MODEL)

    def changed_api(*args: object, **kwargs: object) -> list[int]:
        raise TypeError("_encode_without_added_tokens() got an unexpected keyword argument")

    monkeypatch.setattr(type(model.tokenizer), "_encode_without_added_tokens", changed_api)
    report = audit_model(model)
    check = report.check("special_token_injection")
    assert check.status == "error", check.summary
    assert "internal error" in check.summary and "not the template" in check.summary
    assert exit_code(AuditReport([report]), "error") == 3


def test_a_type_error_in_the_templates_own_code_stays_the_templates() -> None:
    model = load(MODEL)
    renderer = Renderer(model.tokenizer, "{{ messages[0]['content'] + 1 }}")
    with pytest.raises(RenderError) as err:
        renderer.render([{"role": "user", "content": "x"}])
    assert err.value.kind == "type"


def test_a_library_refusing_its_input_is_not_an_internal_error() -> None:
    """transformers refuses (ValueError) a final message the template deletes: the template's doing."""
    model = load(MODEL)
    renderer = Renderer(model.tokenizer, "{% for m in messages %}{{ m['role'] }}{% endfor %}")
    with pytest.raises(RenderError):
        renderer._guarded(
            lambda: model.tokenizer.apply_chat_template(
                [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
                chat_template=renderer.chat_template,
                continue_final_message=True,
                tokenize=False,
            )
        )


@pytest.mark.parametrize(("compared", "failed"), [(1, 5), (2, 3)])
def test_a_check_whose_failed_renders_outnumber_its_comparisons_cannot_pass(compared: int, failed: int) -> None:
    ctx = AuditContext(load(MODEL), AuditOptions())
    spec = CheckSpec(
        "probe_check",
        "a check",
        "warning",
        "",
        "",
        lambda _ctx: Outcome([], "no divergence", comparisons=compared, render_failures=failed),
        verdict="tito-required",
    )
    result = run_check(spec, ctx)
    assert result.status != "pass"
    assert result.status == "not_applicable" and f"{failed} render(s) failed" in result.summary
