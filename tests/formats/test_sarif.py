"""SARIF a code-scanning dashboard can use: one result per check and root cause, on the user's own template
file and the Jinja line responsible when the template's code says which (real Qwen3 audits)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import snapshot
from tito_audit.cli import app
from tito_audit.formats.sarif import RELATED_SHOWN, to_sarif_dict
from tito_audit.formats.template_lines import blame
from tito_audit.rendering.reasoning_conditions import positional_reasoning_conditions
from tito_audit.report.model_report import AuditReport

QWEN3 = "Qwen/Qwen3-0.6B"


def test_one_result_per_check_and_root_cause(report) -> None:
    rep = report(QWEN3)
    results = to_sarif_dict(AuditReport([rep]))["runs"][0]["results"]
    total = sum(len(c.findings) for c in rep.checks)
    assert total > 100 and len(results) < 15  # was one result per finding
    append = [r for r in results if r["ruleId"] == "tool_append_prefix"]
    findings = rep.check("tool_append_prefix").findings
    assert len(append) == 1 and append[0]["properties"]["findings"] == len(findings)
    assert f"({len(findings)} findings of this kind" in append[0]["message"]["text"]
    related = append[0]["relatedLocations"]
    assert len(related) == min(RELATED_SHOWN, len(findings) - 1)
    assert all(loc["logicalLocations"][0]["fullyQualifiedName"].startswith(QWEN3 + "/") for loc in related)
    # A Hub model's file is not in the user's repository: no line is claimed there.
    assert append[0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
    assert append[0]["properties"]["lineKnown"] is False


def test_qwen3_history_rewrite_is_blamed_on_its_position_test() -> None:
    text = (snapshot(QWEN3) / "chat_template.jinja").read_text()
    conditions = positional_reasoning_conditions(text)
    assert conditions and "loop.index0 > ns.last_query_index" in conditions[0][1]
    line = text.splitlines()[conditions[0][0] - 1]
    assert "loop.index0 > ns.last_query_index" in line
    b = blame(text, "tool_append_prefix", "history_rewrite")
    assert b is not None and b.line == conditions[0][0]
    assert blame(text, "tool_append_prefix", "whitespace") is None  # nothing in the code says which line


@pytest.fixture
def in_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's repository: their copy of Qwen3's template and a local model folder."""
    (tmp_path / "templates").mkdir()
    shutil.copy(snapshot(QWEN3) / "chat_template.jinja", tmp_path / "templates" / "qwen3.jinja")
    shutil.copytree(snapshot(QWEN3), tmp_path / "models" / "qwen3", ignore=shutil.ignore_patterns("SOURCE.json"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    ("args", "uri"),
    [
        ([QWEN3, "--chat-template", "templates/qwen3.jinja"], "templates/qwen3.jinja"),
        (["models/qwen3"], "models/qwen3/chat_template.jinja"),
    ],
)
def test_local_template_results_point_at_the_users_file_and_line(in_repo: Path, args: list[str], uri: str) -> None:
    out = in_repo / "tito.sarif"
    r = CliRunner().invoke(app, ["audit", *args, "--format", "sarif", "--output", str(out)])
    assert r.exit_code == 1, r.output
    results = json.loads(out.read_text())["runs"][0]["results"]
    assert {res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for res in results} == {uri}
    append = next(res for res in results if res["ruleId"] == "tool_append_prefix")
    line = append["locations"][0]["physicalLocation"]["region"]["startLine"]
    text = (in_repo / uri).read_text().splitlines()
    assert "last_query_index" in text[line - 1] and append["properties"]["lineKnown"] is True
    assert f"Line {line}: `if loop.index0 > ns.last_query_index`" in append["message"]["text"]
