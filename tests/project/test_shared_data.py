"""Tests find ../shared only through conftest; under CI=true a missing ../shared fails the run, never skips it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

TESTS = ROOT / "tests"


def _run_elsewhere(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """This conftest and one test needing the corpus, in a checkout with no ../shared beside it."""
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", tests / "conftest.py")
    (tests / "test_needs.py").write_text(
        "from conftest import needs_corpus\n\n@needs_corpus\ndef test_corpus():\n    assert False\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "HF_HUB_CACHE")}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
        cwd=tests.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_missing_shared_skips_locally_and_fails_under_ci(tmp_path: Path) -> None:
    local = _run_elsewhere(tmp_path / "local", None)
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout + local.stderr
    ci = _run_elsewhere(tmp_path / "ci", "true")
    assert ci.returncode != 0 and "CI=true but the development data is missing" in ci.stdout + ci.stderr


def test_no_test_names_a_machine_path() -> None:
    machine = "/work/" + "shared"  # spelled in two parts so that this file does not match itself
    for path in TESTS.rglob("test_*.py"):
        assert machine not in path.read_text(encoding="utf-8"), path.name
