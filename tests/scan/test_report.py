"""What a scan report tells a reader: which templates are in each class, with template text escaped."""

from __future__ import annotations

import shutil

import pytest
from typer.testing import CliRunner

from tests.conftest import SHARED
from tito_audit.cli import app

CORPUS = SHARED / "template-corpus"
# Cohere's control tokens carry `|` (`<|START_OF_TURN_TOKEN|>`), which a Markdown table must escape.
TEMPLATES = ("Cohere2MoE", "CohereForAI-c4ai-command-r-plus-tool_use")


@pytest.fixture(scope="module")
def scanned(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("scan")
    for name in TEMPLATES:
        shutil.copy(CORPUS / f"{name}.jinja", folder / f"{name}.jinja")
    md = folder / "summary.md"
    r = CliRunner().invoke(
        app,
        ["scan", str(folder), "--workers", "0", "--no-progress", "--no-synthesize", "--markdown", str(md)],
        env={"COLUMNS": "200"},
    )  # --no-synthesize: Cohere2MoE stays missing_tokens instead of getting an approximate verdict
    assert r.exit_code == 0, r.output
    return r.stdout, md.read_text(encoding="utf-8")


def test_terminal_summary_names_the_templates_of_each_class(scanned: tuple[str, str]) -> None:
    terminal, _ = scanned
    rows = {ln.split("│")[1].strip(): ln for ln in terminal.splitlines() if ln.count("│") >= 5}
    # the tool_use template read tools as name/description/parameter_definitions: it renders (it was always_raises
    # before tool schemas were probed), so it too writes control tokens no candidate has
    assert "Cohere2MoE" in rows["missing_tokens"]
    assert "CohereForAI-c4ai-command-r-plus-tool_use" in rows["missing_tokens"]


def test_markdown_summary_names_templates_and_escapes_pipes(scanned: tuple[str, str]) -> None:
    _, md = scanned
    assert "**missing_tokens** (2): `Cohere2MoE`, `CohereForAI-c4ai-command-r-plus-tool_use`" in md
    assert r"\<\|START_OF_TURN_TOKEN\|\>" in md and "</START_OF_TURN_TOKEN/>" not in md
    for row in (ln for ln in md.splitlines() if ln.startswith("| `Cohere2MoE`")):
        assert len([c for c in row.replace(r"\|", "").split("|")]) == 5  # three cells: no stray column
