"""One engine: what `tito-audit scan` says of a template is what `tito-audit audit TOKENIZER --chat-template FILE`
says, and the scan's cheaper verdict-free endings agree with audit_model's own rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import CORPUS, needs_corpus
from tito_audit import AuditOptions, audit_model
from tito_audit.audit.context import AuditContext
from tito_audit.scan import PoolLimits, scan_directory
from tito_audit.scan.discover import TemplateFile
from tito_audit.scan.template_audit import audit_template
from tito_audit.scenarios.catalog import QUICK_SCENARIOS, SHAPES

# Real templates of four vocabularies (and two verdicts at least: Qwen3 and gpt-oss differ).
SAMPLE = (
    "Qwen-Qwen3-0.6B",
    "unsloth-gpt-oss-20b",
    "microsoft-Phi-3-mini-4k-instruct",
    "mistralai-Mistral-Nemo-Instruct-2407",
)


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sample")
    for name in SAMPLE:
        if (CORPUS / f"{name}.jinja").is_file():
            shutil.copy(CORPUS / f"{name}.jinja", folder / f"{name}.jinja")
    return scan_directory(str(folder), "auto", limits=PoolLimits(workers=2, scenarios="full"))


@needs_corpus
def test_scan_verdict_is_the_audit_commands_verdict(scanned) -> None:
    from tito_audit.cli import app

    assert len(scanned.results) == len(SAMPLE) and scanned.crashes == 0
    verdicts = set()
    for r in scanned.results:
        assert r.verdict, (r.name, r.cls, r.reason)
        res = CliRunner().invoke(app, ["audit", r.tokenizer, "--chat-template", r.path, "-f", "json", "-q"])
        assert res.exit_code in (0, 1), res.output
        assert json.loads(res.stdout)["models"][0]["verdict"] == r.verdict == r.cls, r.name
        verdicts.add(r.verdict)
    assert len(verdicts) >= 2


def test_missing_tokens_is_decided_before_the_full_audit(tmp_path: Path, loaded) -> None:
    """A template written for another vocabulary is not audited: scenarios are played only until one renders."""
    model = loaded("qwen3-0.6b")
    llama_like = (
        "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
        "{{ m.content or '' }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
    )
    path = tmp_path / "llama_like.jinja"
    path.write_text(llama_like)
    r = audit_template(TemplateFile("llama_like", path), model)
    assert r.cls == "missing_tokens" and r.verdict is None
    assert r.missing_tokens == ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    assert r.scenarios_ok == 1 and r.scenarios_total > 10

    # The same vocabulary gap on a template that raises for every conversation: that class wins, as it does
    # for audit_model (which reports the template as failing for every conversation).
    raising = "<|start_header_id|>{{ raise_exception('no conversation renders') }}"
    path.write_text(raising)
    r = audit_template(TemplateFile("raising", path), model)
    report = audit_model(model.with_template(raising, str(path)))
    assert r.cls == "always_raises" and report.error_kind == "template_always_raises"
    assert "no conversation renders" in r.reason


def test_a_template_without_verdict_keeps_the_audits_error_kind(tmp_path: Path, loaded) -> None:
    model = loaded("qwen3-0.6b")
    path = tmp_path / "runaway.jinja"
    path.write_text("{% for m in messages %}{{ m.content * 9999999 }}{% endfor %}<|im_end|>")
    r = audit_template(TemplateFile("runaway", path), model)
    assert r.cls == "limit_exceeded" and r.verdict is None


def test_quick_scenarios_cover_every_shape_and_are_a_subset(loaded) -> None:
    model = loaded("qwen3-0.6b")
    full = AuditContext(model, AuditOptions())
    quick = AuditContext(model, AuditOptions(scenarios="quick"))
    full_ids = {s.id for s in full.scenarios}
    quick_ids = {s.id for s in quick.scenarios}
    assert quick_ids < full_ids and len(quick_ids) < len(full_ids) / 2
    assert {i.split("/")[0] for i in quick_ids} >= set(SHAPES)
    catalog = {s.id for s in quick.scenarios if "derived" not in s.tags}  # derived from the template: both sets
    assert {q.split("[")[0] for q in catalog} == set(QUICK_SCENARIOS)
    assert quick_ids - catalog == {s.id for s in full.scenarios if "derived" in s.tags}
    with pytest.raises(ValueError, match="scenarios must be one of"):
        AuditOptions(scenarios="tiny")


def test_quick_scan_says_so_in_the_report(tmp_path: Path, loaded) -> None:
    model = loaded("qwen2.5-7b-instruct")
    report = audit_model(model, AuditOptions(scenarios="quick"))
    assert report.options["scenarios"] == "quick" and "scenarios" not in audit_model(model).options
    path = tmp_path / "qwen25.jinja"
    path.write_text(model.chat_template)
    r = audit_template(TemplateFile("qwen25", path), model, scenarios="quick")
    assert r.verdict == report.verdict and r.scenarios_total == len(
        AuditContext(model, AuditOptions(scenarios="quick")).scenarios
    )
