"""The docs document every registered check (generated pages, fresh), class and verdict; the CI examples use
options that exist."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import typer.main
import yaml

from tests.conftest import ROOT, SHARED_MODELS
from tito_audit.audit.checks import FINDING_CLASSES, ordered_checks
from tito_audit.cli import app
from tito_audit.report.verdict import VERDICTS

CHECKS_MD = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")


def audit_options() -> set[str]:
    command = typer.main.get_command(app).commands["audit"]  # type: ignore[attr-defined]
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("-")}


def _generate_docs():  # type: ignore[no-untyped-def]
    """``scripts/generate_docs.py`` as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("generate_docs", ROOT / "scripts" / "generate_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_docs_are_fresh() -> None:
    """Every generated page and block is what ``scripts/generate_docs.py`` writes from the registry today."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_docs.py"), "--check"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_changed_check_makes_its_page_stale() -> None:
    """The freshness test can fail: a check whose docstring changed no longer matches its page (and only it)."""
    from tito_audit.registry import CHECKS

    generate = _generate_docs()
    entry = CHECKS.get("double_bos")
    assert entry is not None
    CHECKS.replace("double_bos", entry.obj, doc=entry.doc + "\n\nMore.")
    try:
        stale = [p for p, text in generate.pages().items() if p.read_text(encoding="utf-8") != text]
    finally:
        CHECKS.replace("double_bos", entry.obj, doc=entry.doc)
    assert [p.relative_to(ROOT).as_posix() for p in stale] == ["docs/checks/double_bos.md"]


def test_every_registered_check_has_a_page_with_a_real_example() -> None:
    pages = sorted(p.stem for p in (ROOT / "docs" / "checks").glob("*.md"))
    assert pages == sorted(spec.id for spec in ordered_checks())  # every check, no stale ones
    for spec in ordered_checks():
        page = (ROOT / "docs" / "checks" / f"{spec.id}.md").read_text(encoding="utf-8")
        assert f"[`{spec.id}`](checks/{spec.id}.md)" in CHECKS_MD  # the overview links to it
        for part in ("## What it detects, and why it matters for RL", "**Example**", "## Fix"):
            assert part in page, f"{spec.id}: no {part}"
        assert f"severity **{spec.severity}**" in page or (spec.severity == "warning" and "severity warning" in page)
        example = page[page.index("**Example**") : page.index("## Fix")]
        assert any(f"`{m}`" in example for m in SHARED_MODELS), f"{spec.id}: example names no shared model"


def test_finding_classes_and_verdicts_are_documented() -> None:
    table = CHECKS_MD[CHECKS_MD.index("## Finding classes") : CHECKS_MD.index("## Verdicts")]
    assert {m for m in re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)} == set(FINDING_CLASSES)
    verdicts = CHECKS_MD[CHECKS_MD.index("## Verdicts") :]
    for verdict in VERDICTS:
        assert f"`{verdict}` —" in verdicts


def ci_gate_text() -> str:
    readme = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    start = readme.index("## CI gate")
    return readme[start : readme.index("\n## ", start + 1)] + CHECKS_MD[CHECKS_MD.index("## The CI gate") :]


def test_ci_examples_use_options_that_exist() -> None:
    used = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", ci_gate_text()))
    assert {"--fail-on", "--baseline", "--suppressions", "--format", "--output"} <= used
    assert used <= audit_options(), used - audit_options()


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_ci_examples_name_real_formats(fmt: str) -> None:
    from tito_audit.formats import OUTPUT_FORMATS

    assert f"--format {fmt}" in ci_gate_text() and fmt in OUTPUT_FORMATS


def test_pre_commit_hook_manifest() -> None:
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    hook = next(h for h in hooks if h["id"] == "tito-audit")
    assert hook["entry"] == "tito-audit audit" and hook["language"] == "python"
    assert hook["pass_filenames"] is False  # models come from args, not from the changed files
    for path in ("tito-audit.toml", "pyproject.toml", "templates/qwen3-tito.jinja", "m/tokenizer_config.json"):
        assert re.search(hook["files"], path), path
    assert not re.search(hook["files"], "src/train.py")
    snippet = ci_gate_text()
    args = re.search(r"- id: tito-audit\n\s+args: \[(.*)\]", snippet)
    assert args is not None
    assert {a.strip() for a in args.group(1).split(",") if a.strip().startswith("--")} <= audit_options()


def test_the_index_lists_every_page() -> None:
    """docs/index.md names every page of docs/ (the generated check pages through checks.md)."""
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([\w./-]+)\)", index))
    pages = {p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md"}
    assert pages <= linked, pages - linked
    assert {p for p in linked if not p.startswith("../")} <= {p.name for p in (ROOT / "docs").iterdir()}
