"""No finished work lost, no traceback: ``--output`` checked before any work and written atomically, contradictory
options refused in one line, the format read from the output's suffix."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import tito
from tito_audit.cli.output import SUFFIX_FORMATS, write_atomically

cli = tito


def _one_line_exit_2(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    assert all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize(
    ("target", "words"),
    [
        (lambda tmp: tmp, ("is a directory",)),
        (lambda tmp: tmp / "missing" / "r.json", ("does not exist",)),
        (lambda tmp: tmp / "file.txt" / "r.json", ("is not a directory",)),
        (lambda tmp: Path("/sys/tito-audit-report.json"), ("cannot be written",)),
    ],
    ids=["directory", "missing-directory", "under-a-file", "unwritable"],
)
def test_a_bad_output_is_one_line_before_any_work(tmp_path: Path, target, words) -> None:
    (tmp_path / "file.txt").write_text("x")
    path = target(tmp_path)
    # the model does not exist: a check after the audit would name the model, not the output
    done = cli("audit", "no-such-model-anywhere", "-o", str(path))
    _one_line_exit_2(done, "--output", *words)
    assert not (tmp_path / "missing").exists()  # no directory is created


def test_table_fix_scan_and_replay_check_their_outputs_first(tmp_path: Path) -> None:
    missing = tmp_path / "missing" / "out"
    _one_line_exit_2(cli("table", "no-such-model", "-o", str(missing)), "--output")
    _one_line_exit_2(cli("fix", "no-such-model", "-o", str(missing)), "--output")
    _one_line_exit_2(cli("scan", str(tmp_path), "--json", str(missing)), "--json")
    _one_line_exit_2(cli("scan", str(tmp_path), "--markdown", str(tmp_path)), "--markdown")
    log = tmp_path / "log.jsonl"
    log.write_text("{}\n")
    _one_line_exit_2(cli("replay", str(log), "--model", "no-such-model", "-o", str(missing)), "--output")


def test_write_is_atomic(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "report.json"
    target.write_text("the last report")
    write_atomically(target, "new")
    assert target.read_text() == "new"

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        write_atomically(target, "half of a report")
    assert target.read_text() == "new"  # what was there stays
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary file left


def test_atomic_write_keeps_the_mode_a_plain_write_gives(tmp_path: Path) -> None:
    fresh, plain = tmp_path / "a.md", tmp_path / "b.md"
    write_atomically(fresh, "x")
    plain.write_text("x")
    assert fresh.stat().st_mode == plain.stat().st_mode


def test_output_suffix_chooses_the_format(tmp_path: Path) -> None:
    html, sarif = tmp_path / "report.html", tmp_path / "report.sarif.json"
    assert cli("audit", "qwen2.5-7b-instruct", "-o", str(html)).returncode == 0
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert cli("audit", "qwen2.5-7b-instruct", "-o", str(sarif)).returncode == 0
    assert json.loads(sarif.read_text())["version"] == "2.1.0"
    text = tmp_path / "report.txt"  # a suffix that names no format: terminal text, as before
    assert cli("audit", "qwen2.5-7b-instruct", "-o", str(text)).returncode == 0
    assert "qwen2.5-7b-instruct  SAFE" in text.read_text()
    assert set(SUFFIX_FORMATS.values()) <= {"json", "markdown", "html", "sarif"}


def test_contradictory_options_are_one_line(tmp_path: Path) -> None:
    _one_line_exit_2(cli("audit", "qwen2.5-7b-instruct", "-o", str(tmp_path / "r.html"), "--format", "json"), "html")
    assert not (tmp_path / "r.html").exists()
    _one_line_exit_2(cli("audit", "qwen2.5-7b-instruct", "--verbose", "--quiet"), "--verbose", "--quiet")


def test_an_unreachable_min_coverage_says_so() -> None:
    done = cli("audit", "qwen2.5-7b-instruct", "--quiet", "--min-coverage", "1000")
    assert done.returncode == 2
    assert "--min-coverage 1000 is unreachable: its catalogue has" in done.stderr
    reachable = cli("audit", "qwen2.5-7b-instruct", "--quiet", "--min-coverage", "30")
    assert reachable.returncode == 0, reachable.stderr
