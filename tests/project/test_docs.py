"""docs/checks.md documents every registered check, class and verdict; the CI examples use options that exist."""

from __future__ import annotations

import re

import pytest
import typer.main
import yaml

from tests.conftest import ROOT, SHARED_MODELS
from tito_audit.audit.checks import FINDING_CLASSES, ordered_checks
from tito_audit.cli import app
from tito_audit.report.verdict import VERDICTS

CHECKS_MD = (ROOT / "docs" / "checks.md").read_text(encoding="utf-8")


def sections(text: str) -> dict[str, str]:
    """``## `id` `` heading -> the text up to the next ``## `` heading."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {m.group(1): part for part in parts if (m := re.match(r"`([a-z_]+)`", part))}


def audit_options() -> set[str]:
    command = typer.main.get_command(app).commands["audit"]  # type: ignore[attr-defined]
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts) if opt.startswith("-")}


def test_every_registered_check_has_a_complete_section() -> None:
    docs = sections(CHECKS_MD)
    registered = [spec.id for spec in ordered_checks()]
    assert list(docs) == registered  # every check, no stale ones, in registry order
    for spec in ordered_checks():
        body = docs[spec.id]
        for part in ("**Detects.**", "**Why it matters for RL.**", "**Example**", "**Fix.**"):
            assert part in body, f"{spec.id}: no {part}"
        assert f"severity **{spec.severity}**" in body or (spec.severity == "warning" and "severity warning" in body)
        example = body[body.index("**Example**") : body.index("**Fix.**")]
        assert any(f"`{m}`" in example for m in SHARED_MODELS), f"{spec.id}: example names no shared model"


def test_finding_classes_and_verdicts_are_documented() -> None:
    table = CHECKS_MD[CHECKS_MD.index("## Finding classes") : CHECKS_MD.index("## Verdicts")]
    assert {m for m in re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)} == set(FINDING_CLASSES)
    verdicts = CHECKS_MD[CHECKS_MD.index("## Verdicts") :]
    for verdict in VERDICTS:
        assert f"`{verdict}` —" in verdicts


def ci_gate_text() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
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
