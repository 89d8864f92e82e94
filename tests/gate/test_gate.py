"""The CI gate on real shared models: suppressions, baselines and --fail-on, through the CLI and the library."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT
from tito_audit.cli import app
from tito_audit.cli.audit import exit_code
from tito_audit.errors import UsageError
from tito_audit.gate import Suppression, apply_suppressions, load_baseline, load_suppressions
from tito_audit.report.model_report import SCHEMA_VERSION, AuditReport
from tito_audit.report.verdict import decide

QWEN3 = "Qwen/Qwen3-0.6B"
LLAMA = "meta-llama/Llama-3.2-3B-Instruct"


def toml_entries(entries: list[dict[str, str]], table: str = "suppress") -> str:
    return "".join(f"[[{table}]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in e.items()) + "\n" for e in entries)


def failing(rep: Any) -> list[Any]:
    return [c for c in rep.checks if c.status == "fail"]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, report: Callable[[str], Any]) -> Callable[..., Any]:
    """``tito-audit audit ARGS`` run in tmp_path; the audit step returns copies of the session's real reports.

    Everything after the audit (gate config, suppressions, baseline, rendering, exit code) runs for real.
    """
    import tito_audit.cli.audit as cli_audit

    def served(specs: list[str], *args: Any, **kwargs: Any) -> AuditReport:
        return AuditReport([copy.deepcopy(report(s)) for s in specs])

    monkeypatch.setattr(cli_audit, "audit", served)
    monkeypatch.chdir(tmp_path)
    return lambda *args: CliRunner().invoke(app, ["audit", *args])


def findings_of(doc: dict[str, Any], check_id: str) -> list[dict[str, Any]]:
    return [f for m in doc["models"] for c in m["checks"] if c["id"] == check_id for f in c["findings"]]


# --- suppressions -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_suppressing_qwen3_failing_checks_turns_exit_1_into_0(
    report: Callable[[str], Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end (a real audit in the CLI): the gate passes, yet every finding is still in the JSON."""
    rep = report(QWEN3)
    fails = failing(rep)
    assert fails and exit_code(AuditReport([copy.deepcopy(rep)]), "error") == 1
    reason = "we keep a token buffer and start a new sample at each rewrite"
    (tmp_path / "tito-audit.toml").write_text(
        toml_entries([{"model": "Qwen/Qwen3-*", "check": c.id, "reason": reason} for c in fails])
    )
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["audit", QWEN3, "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["schema_version"] == SCHEMA_VERSION == "1.4"
    model = doc["models"][0]
    for c in fails:
        out = next(x for x in model["checks"] if x["id"] == c.id)
        assert len(out["findings"]) == len(c.findings) > 0
        assert all(f["suppressed"] and f["suppression_reason"] == reason for f in out["findings"])
        assert out["status"] == "pass" and f"{len(c.findings)} suppressed" in out["summary"]
    # Other checks are untouched; suppressing tool_append_prefix never makes a rewriting template "safe".
    assert not any(
        f["suppressed"] for c in model["checks"] if c["id"] not in {x.id for x in fails} for f in c["findings"]
    )
    assert rep.verdict == "unsafe" and model["verdict"] == "tito-required"
    used = doc["suppressions"]["used"]
    assert [u["check"] for u in used] == [c.id for c in fails]
    assert [u["findings"] for u in used] == [len(c.findings) for c in fails]
    assert doc["suppressions"]["unused"] == [] and "unused" not in res.stderr


@pytest.mark.parametrize(
    ("toml", "says"),
    [
        (
            '[[suppress]]\nmodel = "Qwen/*"\ncheck = "history_rewrite"\n',
            "entry 1 (check='history_rewrite'): no `reason`",
        ),
        (
            '[[suppress]]\ncheck = "roundtrip"\nreason = "ok"\n[[suppress]]\ncheck = "loss_mask"\nreason = "  "\n',
            "entry 2 (check='loss_mask'): no `reason`",
        ),
        ('[[suppress]]\ncheck = "history_rewrites"\nreason = "typo"\n', "unknown check id 'history_rewrites'"),
        ('[[suppress]]\ncheck = "roundtrip"\nreasons = "typo"\n', "unknown key(s) 'reasons'"),
        ('[[suppress]]\nmodel = "Qwen/*"\nreason = "no check"\n', "no `check`"),
        ('[[suppress]]\ncheck = "roundtrip"\nreason = "x"\nmodel = 3\n', "model must be a string"),
        ("[[suppress]\n", "not valid TOML"),
        ('[[supress]]\ncheck = "roundtrip"\nreason = "x"\n', "unknown key(s) 'supress'"),
    ],
)
def test_bad_suppression_file_is_one_line_exit_2(
    toml: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Config errors stop the run before any model is audited: exit 2, one line naming the file and entry."""
    (tmp_path / "tito-audit.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["audit", QWEN3])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: tito-audit.toml: ") and res.stderr.count("\n") == 1, res.stderr
    assert says in res.stderr
    assert "Traceback" not in res.output and res.stdout == ""


def test_missing_explicit_suppressions_file_is_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["audit", QWEN3, "--suppressions", str(tmp_path / "nope.toml")])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1
    assert f"{tmp_path / 'nope.toml'}: cannot read suppressions" in res.stderr


def test_unused_suppression_is_reported(cli: Callable[..., Any], report: Callable[[str], Any], tmp_path: Path) -> None:
    rep = report(QWEN3)
    quiet_check = next(c.id for c in rep.checks if not c.findings)
    Path("tito-audit.toml").write_text(
        toml_entries(
            [
                {"model": QWEN3, "check": "loss_mask", "reason": "masks come from the token buffer"},
                {"model": QWEN3, "check": quiet_check, "reason": "stale"},
                {"model": "meta-llama/*", "check": "loss_mask", "reason": "another model"},
            ]
        )
    )
    res = cli(QWEN3, "--format", "json")
    assert res.exit_code == 1  # tool_append_prefix still fails
    warnings = [line for line in res.stderr.splitlines() if "unused suppression" in line]
    assert len(warnings) == 2
    assert "entry 2" in warnings[0] and repr(quiet_check) in warnings[0]
    assert "entry 3" in warnings[1] and "'meta-llama/*'" in warnings[1]
    doc = json.loads(res.stdout)
    assert [u["check"] for u in doc["suppressions"]["unused"]] == [quiet_check, "loss_mask"]
    assert [(u["check"], u["findings"]) for u in doc["suppressions"]["used"]] == [
        ("loss_mask", len(rep.check("loss_mask").findings))
    ]


def test_pyproject_table_is_honoured_and_tito_audit_toml_wins(
    cli: Callable[..., Any], report: Callable[[str], Any]
) -> None:
    fails = failing(report(QWEN3))
    Path("pyproject.toml").write_text(
        '[project]\nname = "my-rl"\n\n'
        + toml_entries(
            [{"check": c.id, "reason": "handled by our TITO loop"} for c in fails], "tool.tito-audit.suppress"
        )
    )
    res = cli(QWEN3, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["suppressions"]["source"] == "pyproject.toml [tool.tito-audit]"
    assert all(f["suppressed"] for c in fails for f in findings_of(doc, c.id))
    # A tito-audit.toml in the same folder takes precedence over pyproject.toml.
    Path("tito-audit.toml").write_text(toml_entries([{"check": "loss_mask", "reason": "masks from the buffer"}]))
    res = cli(QWEN3, "--format", "json")
    assert res.exit_code == 1
    assert json.loads(res.stdout)["suppressions"]["source"] == "tito-audit.toml"


def test_partial_suppression_keeps_status_and_verdict(report: Callable[[str], Any]) -> None:
    """Suppressing one scenario of a failing check leaves it failing, with the count in its summary."""
    rep = AuditReport([copy.deepcopy(report(QWEN3))])
    append = rep.models[0].check("tool_append_prefix")
    scenario = append.findings[0].scenario
    n = sum(1 for f in append.findings if f.scenario == scenario)
    assert 0 < n < len(append.findings)
    s = Suppression(check="tool_append_prefix", reason="probe only", model="qwen/qwen3-0.6b", scenario=scenario)
    assert apply_suppressions(rep, [s], None) == []
    assert s.matched == n and append.status == "fail" and append.summary.endswith(f"({n} suppressed)")
    assert rep.models[0].verdict == "unsafe" and exit_code(rep, "error") == 1


def test_suppressions_never_make_a_rewriting_template_safe(report: Callable[[str], Any]) -> None:
    """All divergence evidence suppressed: the gate passes, but the verdict stays tito-required."""
    rep = AuditReport([copy.deepcopy(report(QWEN3))])
    every = [Suppression(check=c.id, reason="accepted") for c in rep.models[0].checks if c.findings]
    apply_suppressions(rep, every, None)
    m = rep.models[0]
    assert all(c.status in ("pass", "not_applicable") for c in m.checks)
    assert m.verdict == "tito-required" and exit_code(rep, "warn") == 0


def test_suppressed_tool_append_findings_alone_keep_tito_required(report: Callable[[str], Any]) -> None:
    """A suppressed finding of an unsafe-role check still needs the token buffer: decide never reads it as safe."""
    rep = AuditReport([copy.deepcopy(report(QWEN3))])
    m = rep.models[0]
    for c in m.checks:
        if c.id != "tool_append_prefix":
            c.findings, c.status = [], ("pass" if c.status in ("warn", "fail") else c.status)
    apply_suppressions(rep, [Suppression(check="tool_append_prefix", reason="new sample at each rewrite")], None)
    assert m.check("tool_append_prefix").status == "pass"
    decision = decide(m.checks, m.scenarios)
    assert decision.verdict == m.verdict == "tito-required"
    assert "tito-required:suppressed:rewrites_on_tool_append" in m.verdict_reasons


def test_no_config_means_no_suppressions(tmp_path: Path) -> None:
    assert load_suppressions(cwd=tmp_path) == ([], None)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load_suppressions(cwd=tmp_path) == ([], None)


# --- baseline ---------------------------------------------------------------------------------------------------


def test_baseline_of_the_same_report_passes(cli: Callable[..., Any], report: Callable[[str], Any]) -> None:
    res = cli(QWEN3, "--format", "json", "--output", "base.json")
    assert res.exit_code == 1
    res = cli(QWEN3, "--format", "json", "--baseline", "base.json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    total = sum(len(c.findings) for c in report(QWEN3).checks)
    assert doc["baseline"] == {"file": "base.json", "known": total, "new": 0}
    assert all(f["baseline"] for m in doc["models"] for c in m["checks"] for f in c["findings"])
    # Known findings stay findings: the verdict and statuses are the template's, only the exit code ignores them.
    assert doc["models"][0]["verdict"] == "unsafe"
    assert "new finding" not in res.stderr


def test_baseline_key_ignores_token_index_and_message(cli: Callable[..., Any]) -> None:
    cli(QWEN3, "--format", "json", "--output", "base.json")
    doc = json.loads(Path("base.json").read_text())
    for m in doc["models"]:
        for c in m["checks"]:
            for f in c["findings"]:
                f["index"], f["message"] = (f["index"] or 0) + 7, "worded differently by an older version"
    Path("base.json").write_text(json.dumps(doc))
    assert cli(QWEN3, "--baseline", "base.json").exit_code == 0


def test_baseline_missing_one_finding_fails_naming_it(cli: Callable[..., Any]) -> None:
    cli(QWEN3, "--format", "json", "--output", "base.json")
    doc = json.loads(Path("base.json").read_text())
    append = next(c for c in doc["models"][0]["checks"] if c["id"] == "tool_append_prefix")
    gone = append["findings"].pop(0)
    Path("base.json").write_text(json.dumps(doc))
    res = cli(QWEN3, "--format", "json", "--baseline", "base.json")
    assert res.exit_code == 1
    new = [line for line in res.stderr.splitlines() if line.startswith("new finding")]
    assert new == [
        f"new finding (not in baseline base.json): {QWEN3} tool_append_prefix {gone['scenario']} ({gone['class']}): "
        f"{gone['message']}"
    ]
    out = json.loads(res.stdout)
    assert out["baseline"]["new"] == 1
    assert [f["scenario"] for f in findings_of(out, "tool_append_prefix") if not f["baseline"]] == [gone["scenario"]]


def test_baseline_from_another_model_fails(cli: Callable[..., Any], report: Callable[[str], Any]) -> None:
    # (the flag is kept for a Llama SAFE that names what it did not probe; it has named nothing since red team 28)
    assert cli(LLAMA, "--format", "json", "--output", "llama.json", "--allow-not-probed").exit_code == 0
    res = cli(QWEN3, "--baseline", "llama.json")
    assert res.exit_code == 1
    n = sum(len(c.findings) for c in failing(report(QWEN3)))
    new = [line for line in res.stderr.splitlines() if line.startswith("new finding")]
    ids = {c.id for c in failing(report(QWEN3))}
    assert len(new) == min(n, 20) and all(QWEN3 in line and line.split()[7] in ids for line in new)
    if n > 20:
        assert f"... and {n - 20} more new finding(s)" in res.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("not json", "baseline is not JSON"),
        ('{"findings": []}', "not a tito-audit JSON report"),
        ('{"schema_version": "2.0", "models": []}', "baseline schema_version '2.0' is incompatible"),
        ('{"schema_version": "1.1", "models": [{"checks": []}]}', "models[0] is malformed"),
    ],
)
def test_bad_baseline_is_one_line_exit_2(content: str, says: str, tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    path.write_text(content)
    res = CliRunner().invoke(app, ["audit", QWEN3, "--baseline", str(path)])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.output
    assert res.stderr.startswith(f"error: {path}: ") and says in res.stderr
    with pytest.raises(UsageError) as info:
        load_baseline(path)
    assert res.stderr == f"error: {info.value.one_line()}\n"


# --- --fail-on --------------------------------------------------------------------------------------------------


def test_fail_on_warn_vs_error_on_a_model_with_only_warnings(
    cli: Callable[..., Any], report: Callable[[str], Any]
) -> None:
    rep = report(LLAMA)
    warned = [c for c in rep.checks if c.status == "warn"]
    assert warned and not failing(rep) and rep.verdict == "safe"
    # a clean SAFE (its tool-result arm for a value that is no text, a number, is played by the sweep of what tools
    # print since red team 28; it named that arm before, exit 3): warnings alone fail only --fail-on warn
    assert not any(r.startswith("not_probed:") for r in rep.verdict_reasons), rep.verdict_reasons
    assert cli(LLAMA).exit_code == 0 and cli(LLAMA, "--fail-on", "warn").exit_code == 1
    accept = "--allow-not-probed"  # nothing to accept: the same exits
    assert cli(LLAMA, accept).exit_code == 0
    assert cli(LLAMA, "--fail-on", "error", accept).exit_code == 0
    assert cli(LLAMA, "--fail-on", "warn", accept).exit_code == 1
    # --fail-on warn gates on warnings, so suppressing each warning check passes it again...
    Path("tito-audit.toml").write_text(
        toml_entries([{"model": LLAMA, "check": c.id, "reason": "known"} for c in warned])
    )
    res = cli(LLAMA, "--fail-on", "warn", "--format", "json", accept)
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["models"][0]["verdict"] == "safe"
    # ...and so does a baseline that already has those warnings.
    Path("tito-audit.toml").unlink()
    assert cli(LLAMA, "--format", "json", "--output", "base.json", accept).exit_code == 0
    assert cli(LLAMA, "--fail-on", "warn", "--baseline", "base.json", accept).exit_code == 0


def _readme_toml() -> str:
    """The `tito-audit.toml` docs/audit.md shows (the CI gate)."""
    readme = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    block = readme.split("```toml\n# tito-audit.toml\n", 1)[1].split("```", 1)[0]
    assert 'check = "naive_rerender"' in block
    return block


@pytest.mark.parametrize("fmt", ["json", "terminal", "markdown", "html"])
def test_the_readme_suppressions_leave_no_suppressed_reason_in_any_verdict_line(
    cli: Callable[..., Any], tmp_path: Path, fmt: str
) -> None:
    """Issue 33 item 5: with naive_rerender suppressed, gpt-oss's verdict line and reasons are read after it."""
    (tmp_path / "tito-audit.toml").write_text(_readme_toml())
    out = cli("openai/gpt-oss-20b", "--format", fmt)
    assert out.exit_code in (0, 1), out.output
    if fmt == "json":
        m = json.loads(out.stdout)["models"][0]
        assert next(c for c in m["checks"] if c["id"] == "naive_rerender")["status"] == "pass"
        assert "tito-required:naive_rerender" not in m["verdict_reasons"]
        assert "tito-required:suppressed:naive_rerender" in m["verdict_reasons"]
        assert m["verdict"] == "tito-required"  # history_rewrite still diverges, and suppressing never makes safe
    else:
        assert "naive_rerender diverges (suppressed: needs the token buffer)" in out.stdout
        assert "naive_rerender diverges;" not in out.stdout and "naive_rerender diverges)" not in out.stdout
