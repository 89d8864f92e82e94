"""`tito-audit audit A B C` in parallel worker processes: same reports as one by one, in input order, and a bad
model never costs the others."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import snapshot
from tito_audit import AuditOptions
from tito_audit import audit_models as audit
from tito_audit.audit.parallel import default_jobs


@pytest.fixture(scope="module")
def corrupt_folder(tmp_path_factory) -> Path:
    """A real tokenizer folder whose tokenizer.json was cut off mid-file."""
    src = snapshot("Qwen/Qwen2.5-7B-Instruct")
    folder = tmp_path_factory.mktemp("corrupt")
    for name in ("tokenizer_config.json", "vocab.json", "merges.txt"):
        if (src / name).is_file():
            (folder / name).write_bytes((src / name).read_bytes())
    full = (src / "tokenizer.json").read_bytes()
    (folder / "tokenizer.json").write_bytes(full[: len(full) // 3])
    return folder


@pytest.fixture(scope="module")
def specs(corrupt_folder) -> list[str]:
    return [
        "Qwen/Qwen2.5-7B-Instruct",
        "no-such-org/no-such-model",
        str(corrupt_folder),
        "microsoft/Phi-3-mini-4k-instruct",
        "google/gemma-2-2b-it",
    ]


def _comparable(report) -> list[dict]:
    """Report dicts without what may differ between runs: timings."""
    out = []
    for m in report.models:
        d = m.to_dict()
        d.pop("seconds")
        out.append(d)
    return out


@pytest.fixture(scope="module")
def parallel(specs):
    return audit(specs, jobs=2)


def test_parallel_reports_equal_sequential_ones_in_input_order(specs, parallel) -> None:
    sequential = audit(specs, jobs=1)
    assert [m.model for m in parallel.models] == specs
    assert _comparable(parallel) == _comparable(sequential)


def test_bad_models_are_reported_and_the_good_ones_audited(specs, parallel) -> None:
    by = {m.model: m for m in parallel.models}
    assert by["no-such-org/no-such-model"].error_kind == "network"  # offline, not in the cache
    assert by[specs[2]].error_kind == "corrupt_tokenizer"
    assert "corrupt or truncated" in (by[specs[2]].error or "")
    for good in ("Qwen/Qwen2.5-7B-Instruct", "microsoft/Phi-3-mini-4k-instruct", "google/gemma-2-2b-it"):
        assert by[good].error is None and by[good].verdict in ("safe", "tito-required", "unsafe")
        assert len(by[good].checks) >= 10


def test_parallel_report_equals_audit_model_of_the_session_fixture(parallel, report) -> None:
    """A worker's report is exactly what this process computes for the same model."""
    mine = report("microsoft/Phi-3-mini-4k-instruct").to_dict()
    theirs = next(m for m in parallel.models if m.model == "microsoft/Phi-3-mini-4k-instruct").to_dict()
    mine.pop("seconds"), theirs.pop("seconds")
    assert theirs == mine


def test_default_jobs_is_one_per_model_at_most_one_per_core() -> None:
    assert default_jobs(1) == 1
    assert 1 <= default_jobs(50) <= 50
    assert default_jobs(2) <= 2


def test_debug_raises_a_worker_error_with_its_traceback(monkeypatch) -> None:
    """With debug, an internal error in a worker reaches the caller, chained to the worker's traceback."""
    from tito_audit.audit.checks import REGISTRY

    def boom(ctx):
        raise ZeroDivisionError("check bug for the test")

    monkeypatch.setitem(REGISTRY, "double_bos", replace(REGISTRY["double_bos"], run=boom))  # inherited by fork
    with pytest.raises(ZeroDivisionError, match="check bug") as info:
        audit(["qwen2.5-7b-instruct", "phi-3-mini-4k-instruct"], AuditOptions(debug=True), jobs=2)
    assert "boom" in str(info.value.__cause__)  # concurrent.futures' remote traceback
    # Without debug the same bug is one check's error status, and both models are still audited. double_bos
    # bears no verdict, so the verdicts stand.
    quiet = audit(["qwen2.5-7b-instruct", "phi-3-mini-4k-instruct"], jobs=2)
    assert all(m.check("double_bos").status == "error" for m in quiet.models)
    assert [m.verdict for m in quiet.models] == ["safe", "unsafe"]


def test_a_verdict_bearing_check_error_makes_the_verdict_error(monkeypatch) -> None:
    """A verdict never rests on a check that errored: naive_rerender crashing turns safe into error (with the
    reason); a model already proven unsafe by another check stays unsafe, and says what could not be checked."""
    from tito_audit.audit.checks import REGISTRY

    def boom(ctx):
        raise ZeroDivisionError("check bug for the test")

    monkeypatch.setitem(REGISTRY, "naive_rerender", replace(REGISTRY["naive_rerender"], run=boom))
    qwen, phi = audit(["qwen2.5-7b-instruct", "phi-3-mini-4k-instruct"], jobs=2).models
    assert qwen.check("naive_rerender").status == "error"
    assert qwen.verdict == "error" and "error:naive_rerender:check_error" in qwen.verdict_reasons
    assert phi.verdict == "unsafe" and "error:naive_rerender:check_error" in phi.verdict_reasons


def test_cli_jobs_reports_every_model_and_one_line_per_error(corrupt_folder) -> None:
    from tito_audit.cli import app

    models = ["qwen2.5-7b-instruct", str(corrupt_folder), "phi-3-mini-4k-instruct"]
    res = CliRunner().invoke(app, ["audit", *models, "--jobs", "2", "-f", "json"])
    assert res.exit_code == 2, res.output
    data = json.loads(res.stdout)
    assert [m["model"] for m in data["models"]] == models
    assert [m["verdict"] == "error" for m in data["models"]] == [False, True, False]
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(corrupt_folder) in errors[0]


def test_progress_bar_on_a_terminal_only(monkeypatch) -> None:
    """The bar goes to stderr when it is a terminal, advances per finished model, and needs no refresh thread
    (worker processes are forked while it is shown)."""
    import io
    import threading

    from rich.console import Console

    import tito_audit.cli.audit as cli_audit

    screen = io.StringIO()
    monkeypatch.setattr(cli_audit, "Console", lambda **kw: Console(file=screen, force_terminal=True, width=100))
    before = threading.active_count()
    report = cli_audit.run_audit(
        ["qwen2.5-7b-instruct", "phi-3-mini-4k-instruct"], AuditOptions(), False, None, None, True, jobs=2
    )
    assert [m.verdict != "error" for m in report.models] == [True, True]
    assert "2/2" in screen.getvalue() and threading.active_count() == before

    plain = io.StringIO()
    monkeypatch.setattr(cli_audit, "Console", lambda **kw: Console(file=plain, force_terminal=False))
    cli_audit.run_audit(["phi-3-mini-4k-instruct"], AuditOptions(), False, None, None, True)
    assert plain.getvalue() == ""
