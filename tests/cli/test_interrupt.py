"""Ctrl-C on every command (audit, table, scan, fix, replay, rl), sent by the test as a terminal sends it (SIGINT
to the command's process group): the run stops, says in one line what was interrupted and what was kept, writes
the reports of finished work marked ``"complete": false``, ends its worker processes and exits 130, without a
traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CORPUS, ROOT, SHARED_MODELS

BUNDLED = ["qwen3-0.6b", "qwen2.5-7b-instruct", "gpt-oss-20b", "deepseek-v3", "olmo-2-1124-7b-instruct"]
MODELS = (BUNDLED + SHARED_MODELS) * 2  # long enough that the interrupt comes before the last one


def _interrupted(tmp_path: Path, jobs: str, cpu_seconds: float) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``audit MODELS --jobs N -o report.json``, interrupted once it has spent ``cpu_seconds`` of CPU."""
    out = tmp_path / "report.json"
    return ctrl_c(["audit", *MODELS, "--jobs", jobs, "-o", str(out)], cpu_seconds, tmp_path), out


def ctrl_c(
    args: list[str], cpu_seconds: float, cwd: Path = ROOT, sig: int = signal.SIGINT
) -> subprocess.CompletedProcess[str]:
    """``tito-audit ARGS`` in its own session, whose process group gets SIGINT (what a terminal's Ctrl-C does; or
    ``sig``) once the session has spent ``cpu_seconds`` of CPU (the loaded machine's clock); no process of the
    session may be left once the command has exited."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tito_audit", *args]
    proc = subprocess.Popen(argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 600
    while proc.poll() is None and _session_cpu(proc.pid) < cpu_seconds and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the command ended before the interrupt: give it more work"
    os.killpg(proc.pid, sig)
    stdout, stderr = proc.communicate(timeout=300)
    end = time.monotonic() + 10
    while _session_processes(proc.pid) and time.monotonic() < end:  # workers are ended, not left to finish
        time.sleep(0.2)
    assert not _session_processes(proc.pid), "worker processes outlived the interrupted command"
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def _session_processes(session: int) -> list[str]:
    live = []
    for task in Path("/proc").glob("[0-9]*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            live.append(task.name)
    return live


def one_line(done: subprocess.CompletedProcess[str], start: str) -> str:
    """Exit 130, no traceback, and one line on stderr, starting with ``start``."""
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), done.stderr
    return lines[0]


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
    assert lines[0] == (
        f"interrupted after {len(report['models'])} of {len(MODELS)} models; the finished ones are kept in {out} "
        "(marked incomplete)"
    )
    assert 0 < len(report["models"]) < len(MODELS)
    assert all(m["verdict"] != "error" for m in report["models"])  # finished models are kept whole


@pytest.mark.slow
def test_sigterm_writes_what_finished_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM to the process group (what ``timeout`` and batch schedulers send before SIGKILL) ended the run at
    once, and the reports of the models it had finished were lost. It is answered as Ctrl-C is, workers included
    (none outlives the command): the finished models are written, marked incomplete, and the exit is 143."""
    out = tmp_path / "report.json"
    done = ctrl_c(["audit", *MODELS, "--jobs", "2", "-o", str(out)], 8.0, tmp_path, sig=signal.SIGTERM)
    assert done.returncode == 143, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(out.read_text())
    assert report["complete"] is False
    assert 0 < len(report["models"]) < len(MODELS)
    assert all(m["verdict"] != "error" for m in report["models"])
    assert f"interrupted after {len(report['models'])} of {len(MODELS)} models" in done.stderr


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


@pytest.mark.slow
def test_ctrl_c_in_table_writes_the_finished_rows_marked_incomplete(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    line = one_line(ctrl_c(["table", *MODELS, "-o", str(out)], 8.0, tmp_path), "interrupted after ")
    done = int(line.split()[2])
    assert line.endswith(f"models; the finished ones are kept in {out} (marked incomplete)"), line
    assert out.read_text().startswith(f"**INCOMPLETE: interrupted after {done} of {len(MODELS)} models.**")


@pytest.mark.slow
def test_ctrl_c_in_scan_writes_every_summary_of_the_finished_templates(tmp_path: Path) -> None:
    files = {"--json": tmp_path / "s.json", "--markdown": tmp_path / "s.md", "--html": tmp_path / "s.html"}
    argv = ["scan", str(CORPUS), "--no-progress", *[a for flag, path in files.items() for a in (flag, str(path))]]
    line = one_line(ctrl_c(argv, 15.0, tmp_path), "interrupted after ")
    summary = json.loads(files["--json"].read_text())
    total = len(list(CORPUS.glob("*.jinja")))
    assert summary["complete"] is False and 0 < summary["templates"] < total, line
    status = f"INCOMPLETE: interrupted after {summary['templates']} of {total} templates"
    assert line == f"{status[12:]}; kept in {', '.join(str(p) for p in files.values())} (marked incomplete)"
    assert status in files["--markdown"].read_text() and status in files["--html"].read_text()


@pytest.mark.slow
def test_ctrl_c_in_fix_writes_nothing_half_proven(tmp_path: Path) -> None:
    out = tmp_path / "fixed.jinja"
    line = one_line(ctrl_c(["fix", "qwen3-0.6b", "-o", str(out)], 2.0, tmp_path), "interrupted while fixing qwen3")
    assert line.endswith("no patch is proven, nothing written") and not out.exists()


@pytest.fixture(scope="module")
def long_log(tmp_path_factory, plays) -> Path:
    """A log long enough that Ctrl-C comes while it is replayed: the episodes of a correct loop, many times."""
    from tito_audit.testing.synthetic import log_episode

    _, _, played = plays("qwen3-0.6b", 0.0, 1)
    lines = [json.dumps(log_episode(p, "correct", f"ep-{k}").record) + "\n" for k, p in enumerate(played[:40])]
    path = tmp_path_factory.mktemp("long") / "long.jsonl"
    with path.open("w") as fh:
        for _ in range(400):
            fh.writelines(lines)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_in_replay_writes_the_records_replayed(tmp_path: Path, long_log: Path, workers: str) -> None:
    out = tmp_path / "r.json"
    argv = ["replay", str(long_log), "-m", "qwen3-0.6b", "-w", workers, "-o", str(out)]
    # the whole log takes about 12 CPU seconds with one worker, its start 1.5: Ctrl-C comes half-way
    line = one_line(ctrl_c(argv, 6.0, tmp_path), "interrupted after ")
    records = int(line.split()[2])
    assert line == (
        f"interrupted after {records} records of {long_log}; what was replayed is kept in {out} (marked incomplete)"
    )
    report = json.loads(out.read_text())
    assert report["complete"] is False and report["models"][0]["replay"]["records"] == records
    assert 0 < records < 16_000


@pytest.mark.slow
def test_ctrl_c_in_rl_summarises_the_finished_steps(tmp_path: Path) -> None:
    out = tmp_path / "rl"
    line = one_line(ctrl_c(["rl", "qwen3-0.6b", "--steps", "400", "--out", str(out)], 40.0, tmp_path), "interrupted")
    if "no step finished" in line:  # the interrupt came during the set-up: nothing to keep, nothing written
        assert line == "interrupted after 0 of 400 steps: no step finished, nothing written" and not out.exists()
        return
    metrics = json.loads((out / "metrics.json").read_text())
    done = len(metrics["steps"])
    assert metrics["summary"]["complete"] is False and 0 < done < 400
    assert line == (
        f"interrupted after {done} of 400 steps: the finished steps are summarised above; kept in "
        f"{out / 'metrics.json'} (marked incomplete)"
    )
