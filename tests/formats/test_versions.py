"""Every report names tito-audit, transformers, tokenizers, jinja2 and hypothesis versions: a transformers release can
change a verdict (a hypothesis release, the search's draws), and the report must say which one produced it."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from tests.conftest import DATA
from tito_audit import __version__
from tito_audit.formats import render_report
from tito_audit.formats.compatibility import compatibility_table
from tito_audit.formats.scan_text import scan_markdown, scan_table
from tito_audit.report.model_report import AuditReport

EXPECTED = {
    "tito-audit": __version__,
    "transformers": metadata.version("transformers"),
    "tokenizers": metadata.version("tokenizers"),
    "jinja2": metadata.version("jinja2"),
    "hypothesis": metadata.version("hypothesis"),
}
WORDS = [f"{name} {version}" for name, version in EXPECTED.items()]


@pytest.fixture(scope="module")
def audit_report(report) -> AuditReport:
    return AuditReport([report("qwen3-0.6b")])


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html"])
def test_human_formats_name_the_versions(audit_report, fmt: str) -> None:
    text = render_report(audit_report, fmt)
    assert all(w in text for w in WORDS), fmt


def test_json_names_them_at_the_top_and_in_provenance(audit_report) -> None:
    doc = json.loads(render_report(audit_report, "json"))
    for where in (doc["libraries"], doc["models"][0]["provenance"]["libraries"]):
        assert {k: where[k] for k in EXPECTED} == EXPECTED
        assert where["compat_fallbacks"] == []


def test_sarif_tool_driver_names_them(audit_report) -> None:
    driver = json.loads(render_report(audit_report, "sarif"))["runs"][0]["tool"]["driver"]
    assert driver["version"] == __version__
    assert {k: driver["properties"]["libraries"][k] for k in EXPECTED} == EXPECTED


def test_compatibility_table_names_them(audit_report) -> None:
    text = compatibility_table(audit_report.models)
    assert all(w in text for w in WORDS)


def test_scan_reports_name_them(tmp_path) -> None:

    from tito_audit.scan import scan_directory

    hostile = DATA / "hostile" / "benign_chatml.jinja"
    (tmp_path / "t.jinja").write_text(hostile.read_text())
    summary = scan_directory(str(tmp_path), "qwen3-0.6b")
    assert {k: summary.to_dict()["libraries"][k] for k in EXPECTED} == EXPECTED
    assert all(w in scan_markdown(summary) for w in WORDS)
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(scan_table(summary))
    text = console.export_text()
    assert all(w in text for w in WORDS), text


def test_quiet_keeps_one_line_per_model_and_names_the_versions(audit_report) -> None:
    """``-q``: the verdict line of each model, then one line of versions (red team C2)."""
    lines = render_report(audit_report, "terminal", quiet=True).strip().splitlines()
    assert len(lines) == len(audit_report.models) + 1
    assert lines[0].startswith("qwen3-0.6b") and all(w in lines[-1] for w in WORDS)


def test_fix_names_the_versions_in_json_and_terminal(loaded) -> None:
    """``fix``'s verdicts before and after depend on the libraries as the audit's do (red team C1)."""
    from rich.console import Console

    from tito_audit.audit.context import AuditOptions
    from tito_audit.cli.fix import _print_terminal
    from tito_audit.fix import propose_fix

    result = propose_fix(loaded("qwen3-0.6b"), AuditOptions())
    doc = json.loads(json.dumps(result.to_dict()))
    assert {k: doc["libraries"][k] for k in EXPECTED} == EXPECTED and doc["tool_version"] == __version__
    console = Console(record=True, width=140)
    _print_terminal(console, result, None)
    text = console.export_text()
    assert all(w in text for w in WORDS), text[:400]
