"""Output read through a pipe (a CI log, `| tee`): rich wrapped it at 80 columns, so template names and check
summaries broke mid-word. On a non-terminal nothing wraps; COLUMNS, when set, still decides."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

LONG_NAME = "an-organisation-with-a-long-name-" + "Very-Long-Model-Name-Instruct-" * 3 + "v2"


def piped(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    """``tito-audit ARGS`` with stdout a pipe, as in a CI job."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT)
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "tito_audit", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pipe")
    for name, model in ((LONG_NAME, "qwen2.5-7b-instruct"), ("qwen3", "qwen3-0.6b")):
        shutil.copy(ROOT / "templates_cache" / model / "chat_template.jinja", out / f"{name}.jinja")
    return out


def test_scan_summary_keeps_template_names_whole(folder: Path) -> None:
    done = piped("scan", str(folder), "--workers", "0", "--no-progress")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if "│" in line]
    assert any(LONG_NAME in line for line in rows), done.stdout
    meanings = ("safe only if rollouts keep token ids (re-rendering breaks)", "TITO breaks even with a token buffer")
    assert any(any(m in line for m in meanings) for line in rows)


def test_scan_honours_columns_when_set(folder: Path) -> None:
    done = piped("scan", str(folder), "--workers", "0", "--no-progress", columns="60")
    assert done.returncode == 0, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) <= 60


def test_audit_check_table_keeps_summaries_whole() -> None:
    report = json.loads(piped("audit", "qwen3-0.6b", "--format", "json").stdout)
    summaries = [c["summary"] for c in report["models"][0]["checks"] if 80 < len(c["summary"]) <= 200]
    assert summaries  # long enough that an 80-column table had to fold them
    done = piped("audit", "qwen3-0.6b")
    assert done.returncode == 1, done.stderr
    for summary in summaries:
        assert any(summary in line for line in done.stdout.splitlines()), summary
