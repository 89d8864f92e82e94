"""Ctrl-C: the run stops, says what finished, writes it (marked incomplete) and exits 130, without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SHARED_MODELS

BUNDLED = ["qwen3-0.6b", "qwen2.5-7b-instruct", "gpt-oss-20b", "deepseek-v3", "olmo-2-1124-7b-instruct"]
MODELS = (BUNDLED + SHARED_MODELS) * 2  # long enough that the interrupt comes before the last one


def _interrupted(tmp_path: Path, jobs: str, cpu_seconds: float) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``audit MODELS --jobs N -o report.json`` in its own session, whose process group gets SIGINT (what a
    terminal's Ctrl-C does) once the session has spent ``cpu_seconds`` of CPU (the loaded machine's clock)."""
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tito_audit", "audit", *MODELS, "--jobs", jobs, "-o", str(out)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 600
    while proc.poll() is None and _session_cpu(proc.pid) < cpu_seconds and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr), out


def _session_cpu(session: int) -> float:
    """CPU seconds of every live process of a session (the CLI and its workers)."""
    ticks = 0
    for task in Path("/proc").glob("[0-9]*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["2", "1"])
def test_ctrl_c_writes_what_finished_and_exits_130(tmp_path: Path, jobs: str) -> None:
    done, out = _interrupted(tmp_path, jobs, cpu_seconds=8.0)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("interrupted after")]
    assert len(lines) == 1, done.stderr
    report = json.loads(out.read_text())
    assert report["complete"] is False
    assert lines[0] == f"interrupted after {len(report['models'])} of {len(MODELS)} models"
    assert 0 < len(report["models"]) < len(MODELS)
    assert all(m["verdict"] != "error" for m in report["models"])  # finished models are kept whole


@pytest.mark.slow
def test_ctrl_c_before_any_model_finished(tmp_path: Path) -> None:
    done, out = _interrupted(tmp_path, "2", cpu_seconds=0.5)
    assert done.returncode == 130 and "Traceback" not in done.stderr, done.stderr
    assert f"interrupted after 0 of {len(MODELS)} models" in done.stderr
    assert json.loads(out.read_text())["complete"] is False


def test_a_complete_report_says_so(report) -> None:
    from tito_audit.formats import render_report
    from tito_audit.report.model_report import AuditReport

    whole = AuditReport([report("qwen3-0.6b")])
    assert json.loads(render_report(whole, "json"))["complete"] is True
    part = AuditReport([report("qwen3-0.6b")], requested=3)
    for fmt in ("terminal", "markdown", "html"):
        assert "interrupted after 1 of 3 models" in render_report(part, fmt)
    sarif = json.loads(render_report(part, "sarif"))
    assert sarif["runs"][0]["invocations"][0]["executionSuccessful"] is False
