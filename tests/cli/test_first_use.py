"""A first-time user on a fresh install: one-line errors, no noise from optional packages, help that reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, invoke, snapshot
from tito_audit import __version__
from tito_audit.cli import app

QWEN3 = "Qwen/Qwen3-0.6B"

# Runs ``python -m tito_audit ARGS`` with torch hidden, as on the default install (no rl extra).
_WITHOUT_TORCH = """
import importlib.util, runpy, sys
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name.split(".")[0] == "torch" else _find(name, *a)
sys.modules["torch"] = None
sys.argv = ["tito-audit", *sys.argv[1:]]
runpy.run_module("tito_audit", run_name="__main__")
"""


def without_torch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH, *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


run = invoke


# --- install ----------------------------------------------------------------------------------------------


def test_ci_builds_its_own_virtual_environment() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    lines = [ln.split("#")[0].strip() for ln in script.splitlines()]
    venv = next(k for k, ln in enumerate(lines) if "-m venv" in ln)
    assert any(ln.startswith("rm -rf") for ln in lines[:venv])  # fresh every run
    first_install = next(k for k, ln in enumerate(lines) if "pip install" in ln)
    assert venv < first_install and "pip check" in script
    assert ".ci-venv" in (ROOT / ".gitignore").read_text()
    assert "tito-audit audit --bundled --quiet" in script
    # the tests run with CI=true: a skipped test or missing ../shared fails the run (tests/conftest.py)
    assert any(ln.startswith("CI=true python -m pytest -q") for ln in lines)


def test_no_pytorch_advisory_without_torch() -> None:
    """transformers' "PyTorch was not found" line must not reach stderr on the default install."""
    out = without_torch("audit", "qwen2.5-7b-instruct", "--quiet")
    assert out.returncode == 0, out.stderr
    assert "PyTorch" not in out.stderr and out.stderr == ""
    out = without_torch("--help")
    assert out.returncode == 0 and "PyTorch" not in out.stderr


def test_rl_without_torch_is_one_line_naming_the_install_command() -> None:
    out = without_torch("rl", "qwen3-0.6b", "--steps", "1")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: tito-audit rl needs torch") and 'pip install -e ".[rl]"' in out.stderr
    readme = (ROOT / "README.md").read_text()
    assert 'pip install -e ".[rl]"' in readme


# --- usage errors: one style, one line, exit 2 ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["audit", "qwen3-0.6b", "--format", "nonsense"], ["terminal", "json", "markdown", "html", "sarif"]),
        (["audit", "qwen3-0.6b", "--fail-on", "info"], ["warn", "error"]),
        (["audit", "qwen3-0.6b", "--thinking", "x"], ["on", "off", "both", "unset"]),
        (["audit", "qwen3-0.6b", "--date", "notadate"], ["YYYY-MM-DD"]),
        (["audit", "qwen3-0.6b", "-k", "garbage"], ["KEY=VALUE"]),
        (["audit", "qwen3-0.6b", "-k", "enable_thinking=maybe"], ["true or false"]),
        (["audit", "qwen3-0.6b", "--jobs", "0"], ["--jobs"]),
        (["scan", ".", "--fail-on", "bogus"], ["unsafe", "tito-required", "safe"]),
        (["scan", ".", "--scenarios", "most"], ["quick", "full"]),
        (["fix", "qwen3-0.6b", "--format", "html"], ["terminal", "json"]),
        (["rl", "qwen3-0.6b", "--device", "tpu"], ["auto", "cpu", "cuda"]),
        (["audit", "qwen3-0.6b", "--no-such-option"], ["--no-such-option"]),
    ],
)
def test_bad_option_values_are_one_error_line_exit_2(args: list[str], names: list[str]) -> None:
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    assert all(n in r.stderr for n in names), r.stderr


def test_scan_fail_on_accepts_every_class_and_empty() -> None:
    from tito_audit.cli.params import many_of
    from tito_audit.report.scan_classes import CLASSES

    check = many_of(lambda: CLASSES)
    assert check("unsafe,tito-required") == "unsafe,tito-required" and check("") == ""


def test_a_model_error_is_printed_once_on_a_terminal() -> None:
    """stdout and stderr on one terminal (a pty): the report already shows the error; stderr does not repeat it."""
    import pty

    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tito_audit", "audit", "no-such-bundled-xyz", "--offline", "--quiet"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 2
    text = b"".join(chunks).decode()
    assert text.count("not a local folder, a bundled name") == 1, text


def test_a_model_error_still_reaches_stderr_when_piped() -> None:
    r = run("audit", "no-such-bundled-xyz", "--offline", "--quiet")
    assert r.exit_code == 2
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")] == [
        "error: no-such-bundled-xyz: not a local folder, a bundled name or a Hub repo id (org/name[@revision])"
    ]


# --- named templates --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def named_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real tokenizer with two named templates: ``default`` (chat_template.jinja) and ``tool_use``."""
    src = snapshot(QWEN3)
    folder = tmp_path_factory.mktemp("named")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).write_bytes((src / name).read_bytes())
    extra = folder / "additional_chat_templates"
    extra.mkdir()
    tool_use = (src / "chat_template.jinja").read_text() + "{#- tool_use copy -#}"
    (extra / "tool_use.jinja").write_text(tool_use)
    return folder


def test_unknown_template_name_is_refused_with_the_names(named_model: Path) -> None:
    r = run("audit", str(named_model), "--template-name", "nosuch", "--quiet")
    assert r.exit_code == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "no chat template named 'nosuch' (available: default, tool_use)" in errors[0]
    r = run("audit", "qwen3-0.6b", "--template-name", "tool_use", "--quiet")
    assert r.exit_code == 2 and "no chat template named 'tool_use' (the model has one unnamed template)" in r.stderr


def test_named_template_provenance_is_the_named_file(named_model: Path) -> None:
    import hashlib

    from tito_audit import load

    tool_use = (named_model / "additional_chat_templates" / "tool_use.jinja").read_text()
    for name in ("tool_use", None):  # tools select tool_use, as transformers does
        prov = load(str(named_model), template_name=name).provenance
        assert prov.template_name == "tool_use"
        assert prov.template_file == "additional_chat_templates/tool_use.jinja"
        assert prov.template_sha256 == hashlib.sha256(tool_use.encode()).hexdigest()
    prov = load(str(named_model), template_name="default").provenance
    assert prov.template_file == "chat_template.jinja" and prov.template_name == "default"


# --- revisions --------------------------------------------------------------------------------------------


def test_short_revision_from_a_report_loads_offline(report) -> None:
    from tito_audit import load

    full = report(QWEN3).provenance.revision
    short = load(f"{QWEN3}@{full[:7]}", offline=True)
    assert short.provenance.revision == full


# --- help -------------------------------------------------------------------------------------------------


def _help_texts() -> list[tuple[str, str]]:
    """``(command, help text as written)`` of every option and argument, rich-markup escapes undone."""
    from typer.main import get_command

    group = get_command(app)
    out = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for param in command.params:
            text = getattr(param, "help", None)
            if text:
                out.append((name, text.replace("\\[", "[")))
    return out


def test_help_shows_every_option_text_whole() -> None:
    """Rich markup ate `[[suppress]]`, `[tool.tito-audit]` and `[@revision]`: every bracket must survive."""
    texts = _help_texts()
    assert any("[[suppress]]" in t for _, t in texts) and any("[@revision]" in t for _, t in texts)
    for name in {n for n, _ in texts}:
        shown = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "400"}).stdout
        flat = " ".join(shown.replace("│", " ").split())
        for cmd, text in texts:
            if cmd == name and "[" in text:
                assert " ".join(text.split()) in flat, (name, text)


def test_top_level_help_names_the_short_form_and_version() -> None:
    top = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "400"})
    assert top.exit_code == 0 and "tito-audit MODEL" in top.stdout and "--version" in top.stdout
    audit = CliRunner().invoke(app, ["audit", "--help"], env={"COLUMNS": "400"})
    assert "wrote FILE" in audit.stdout


def test_version() -> None:
    r = run("--version")
    assert r.exit_code == 0 and r.stdout.strip() == f"tito-audit {__version__}"


def test_the_installed_package_carries_the_version_written_in_version_py() -> None:
    """pyproject.toml's version is dynamic: the installed metadata says what ``_version.py`` says."""
    from importlib.metadata import version

    assert version("tito-audit") == __version__


def test_output_says_where_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    r = run("audit", "qwen2.5-7b-instruct", "--format", "json", "--output", str(out))
    assert r.exit_code == 0 and r.stdout.startswith("qwen2.5-7b-instruct  SAFE  ")  # the verdict, as -q shows it
    assert r.stderr.strip() == f"wrote {out}"
    assert json.loads(out.read_text())["models"][0]["verdict"] == "safe"
