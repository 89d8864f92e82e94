"""The scan over hostile fixtures: every template gets its class, runaways cost one worker, the run goes on."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import DATA
from tito_audit.scan import PoolLimits, scan_directory
from tito_audit.scan.discover import discover
from tito_audit.scan.template_audit import audit_template

HOSTILE = DATA / "hostile"

EXPECTED = {
    "attr_filter": "security",
    "attr_filter_runtime": "security",
    "escape_class_const": "security",
    "escape_cycler_globals": "security",
    "escape_joiner_popen": "security",
    "escape_subclasses": "security",
    "format_string_attack": "security",
    "format_string_runtime": "security",
    "busy_loop": "limit_exceeded",
    "cpuloop": "limit_exceeded",
    "slow_render": "limit_exceeded",
    "tool_turn_loop": "limit_exceeded",
    "late_turn_memory": "limit_exceeded",
    "deep_macro_recursion": "limit_exceeded",
    "exponential_growth": "limit_exceeded",
    "huge_range": "limit_exceeded",
    "output_flood": "limit_exceeded",
    "string_repeat_huge": "limit_exceeded",
    "broken_syntax": "does_not_compile",
    "raises_always": "always_raises",
    "foreign_tokens": "missing_tokens",
}


@pytest.fixture(scope="module")
def summary():
    limits = PoolLimits(workers=2, deadline_s=30)
    return scan_directory(str(HOSTILE), "qwen3-0.6b", limits=limits)


def test_every_hostile_template_is_classified(summary) -> None:
    got = {r.name: r.cls for r in summary.results}
    assert {k: got[k] for k in EXPECTED} == EXPECTED
    assert summary.crashes == 0
    assert len(got) == len(list(HOSTILE.glob("*.jinja")))


def test_benign_and_flagged_templates_still_get_a_verdict(summary) -> None:
    by = {r.name: r for r in summary.results}
    for name in ("benign_chatml", "random_system_line", "reads_date", "reads_environment"):
        assert by[name].verdict in ("safe", "tito-required", "unsafe")
    kinds = {name: {f["kind"] for f in by[name].flags} for name in by}
    assert "nondeterministic" in kinds["random_system_line"]
    assert "reads_date" in kinds["reads_date"]
    assert "reads_environment" in kinds["reads_environment"]
    assert kinds["benign_chatml"] == set()


def test_security_templates_are_reported_with_a_reason(summary) -> None:
    for r in summary.results:
        if r.cls == "security":
            assert "__" in r.reason or "internal" in r.reason, r.reason


def test_hard_deadline_kills_a_worker_and_the_scan_continues(tmp_path: Path) -> None:
    for name in ("busy_loop", "benign_chatml", "huge_range"):
        (tmp_path / f"{name}.jinja").write_text((HOSTILE / f"{name}.jinja").read_text())
    from tito_audit.rendering import RenderLimits

    limits = PoolLimits(workers=1, deadline_s=1.0, render=RenderLimits(seconds=30))
    s = scan_directory(str(tmp_path), "qwen3-0.6b", limits=limits)
    by = {r.name: r for r in s.results}
    assert by["busy_loop"].cls == "limit_exceeded" and by["busy_loop"].error_kind == "hard_timeout"
    assert by["benign_chatml"].verdict is not None  # the replacement worker carried on
    assert by["huge_range"].cls == "limit_exceeded"


def test_a_killed_worker_still_reports_the_tokenizer_it_picked(tmp_path: Path) -> None:
    """With ``auto`` the worker picks; the parent hears the pick before the audit, so a kill keeps it."""
    (tmp_path / "busy_loop.jinja").write_text((HOSTILE / "busy_loop.jinja").read_text())
    from tito_audit.rendering import RenderLimits

    limits = PoolLimits(workers=1, deadline_s=1.0, render=RenderLimits(seconds=30))
    s = scan_directory(str(tmp_path), "auto", ["phi-3-mini-4k-instruct", "qwen3-0.6b"], limits=limits)
    (r,) = s.results
    assert (r.cls, r.error_kind) == ("limit_exceeded", "hard_timeout")
    assert r.tokenizer in ("phi-3-mini-4k-instruct", "qwen3-0.6b") and r.tokenizer_reason


def test_in_process_audit_matches_pool() -> None:
    from tito_audit.sources.load import load

    model = load("qwen3-0.6b")
    for t in discover(HOSTILE):
        if t.name in ("broken_syntax", "escape_joiner_popen", "huge_range", "raises_always"):
            assert audit_template(t, model).cls == EXPECTED[t.name]


def test_cli_bad_folder_is_one_line_exit_2(tmp_path: Path) -> None:
    from tito_audit.cli import app

    res = CliRunner().invoke(app, ["scan", str(tmp_path / "nope"), "-t", "qwen3-0.6b"])
    assert res.exit_code == 2
    assert res.stderr.strip() == f"error: {tmp_path / 'nope'}: folder does not exist"
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(app, ["scan", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "no *.jinja files" in res.stderr and res.stderr.count("\n") == 1


def test_cli_scan_writes_json_and_markdown(tmp_path: Path) -> None:
    import json

    from tito_audit.cli import app

    for name in ("benign_chatml", "escape_cycler_globals", "broken_syntax"):
        (tmp_path / f"{name}.jinja").write_text((HOSTILE / f"{name}.jinja").read_text())
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    res = CliRunner().invoke(
        app,
        [
            "scan",
            str(tmp_path),
            "-t",
            "qwen3-0.6b",
            "--json",
            str(out),
            "--markdown",
            str(md),
            "--no-progress",
            "--fail-on",
            "security",
        ],
    )
    assert res.exit_code == 1, res.output
    data = json.loads(out.read_text())
    assert data["counts"]["security"] == 1 and data["counts"]["does_not_compile"] == 1
    assert data["crashes"] == 0 and data["templates"] == 3
    assert data["scenarios"] == "quick"  # the scan's default set, recorded in the summary
    benign = next(r for r in data["results"] if r["name"] == "benign_chatml")
    assert benign["verdict"] and benign["scenarios_total"] < 30  # quick: 16 scenarios (and thinking variants)
    assert "| security | 1 |" in md.read_text()
