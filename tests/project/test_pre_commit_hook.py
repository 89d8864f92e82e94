"""The pre-commit hooks run for real: ``pre-commit try-repo`` installs this repository into the hook's own
environment (``language: python``: a fresh virtualenv and ``pip install`` of the repository, its dependencies
from the package index) and runs the hook in a scratch git repository holding a safe and an unsafe template.

Slow by nature: each ``try-repo`` builds its environment from nothing (what that costs:
``benchmarks/bench_pre_commit.py``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tito_audit.report.scan_classes import CLASSES, VERDICTS

HOOK = "tito-audit-templates"


def manifest() -> dict[str, dict]:
    return {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's repository: Qwen2.5's template (safe) and Qwen3's (unsafe: it drops past reasoning when a tool
    result is appended), under names that say nothing about either model."""
    repo = tmp_path_factory.mktemp("user-repo")
    (repo / "templates").mkdir()
    shutil.copy(ROOT / "templates_cache" / "qwen2.5-7b-instruct" / "chat_template.jinja", repo / "templates/a.jinja")
    shutil.copy(ROOT / "templates_cache" / "qwen3-0.6b" / "chat_template.jinja", repo / "templates/b.jinja")
    (repo / "README.md").write_text("not a template\n", encoding="utf-8")
    git(repo, "init", "-q")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "templates")
    return repo


def try_repo(repo: Path, *files: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRE_COMMIT", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["HF_HUB_OFFLINE"] = "1"
    # The bundled tokenizers live in the repository's templates_cache/, which `pip install .` does not carry yet:
    # point the hook's install at this checkout's copy (TITO_AUDIT_TEMPLATES_CACHE, the documented override).
    env["TITO_AUDIT_TEMPLATES_CACHE"] = str(ROOT / "templates_cache")
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(ROOT), HOOK, "--verbose", "--files", *files],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_hook_fails_on_every_class_but_the_verdicts_that_keep_tito() -> None:
    hook = manifest()[HOOK]
    assert hook["language"] == "python" and hook["entry"].startswith("tito-audit scan")
    classes = hook["args"][hook["args"].index("--fail-on") + 1].split(",")
    assert set(classes) == set(CLASSES) - (set(VERDICTS) - {"unsafe"})
    for path, runs in (("templates/a.jinja", True), ("deep/x/chat.jinja", True), ("a.py", False)):
        assert bool(re.search(hook["files"], path)) is runs, path


def test_the_hook_plays_the_full_scenario_set_and_fails_what_the_audit_calls_unsafe(tmp_path: Path) -> None:
    """Qwen2.5's template plus one rule: a JSON tool result of an earlier tool round (a later call has been
    answered) is re-rendered minified, so the next round's tool append rewrites it. Only scenarios of the full set
    have a JSON tool result followed by another tool round; with the quick set the hook passed it as safe while
    `tito-audit audit` says UNSAFE (red-team r6). The hook's own entry and args, run as pre-commit runs them
    (without building its environment: test_try_repo_* do that). (The rule minified every result but the last
    before 2026-11-30: that is TITO-REQUIRED, as the audit now says, and its UNSAFE had come from a false
    ``drops_tool_results``.)"""
    hook = manifest()[HOOK]
    template = tmp_path / "minifies-old-json-results.jinja"
    shutil.copy(ROOT / "tests" / "data" / "hook" / template.name, template)
    entry = shlex.split(hook["entry"])
    assert entry[:2] == ["tito-audit", "scan"] and entry[entry.index("--scenarios") + 1] == "full"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    command = [sys.executable, "-m", "tito_audit", *entry[1:], *hook["args"], template.name]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "minifies-old-json-results: unsafe: " in done.stderr, done.stderr


@pytest.mark.slow
def test_try_repo_passes_the_safe_template(scratch: Path) -> None:
    done = try_repo(scratch, "templates/a.jinja")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"tito-audit \(changed chat templates\)\.+Passed", done.stdout), done.stdout
    assert "safe" in done.stdout and "unsafe" not in done.stdout


@pytest.mark.slow
def test_try_repo_fails_the_unsafe_template_and_says_why(scratch: Path) -> None:
    done = try_repo(scratch, "templates/a.jinja", "templates/b.jinja", "README.md")
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"tito-audit \(changed chat templates\)\.+Failed", done.stdout), done.stdout
    # one line per failing template: its name, class and the reasons; the safe one is not among them
    failing = [line for line in done.stdout.splitlines() if re.match(r"templates/[ab]: ", line)]
    assert failing and all(line.startswith("templates/b: unsafe: ") for line in failing), done.stdout
    assert "rewrites the history when tool results are appended" in failing[0]
