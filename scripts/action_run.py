"""The run step of the GitHub Action (action.yml): install tito-audit, audit the models and template files given,
write one SARIF log for code scanning, print what failed, and exit with the audit's code.

Inputs come as the action passes them, in INPUT_* variables (so CI runs this very script offline, on a bundled
model, as tests/project/test_action.py does):

    INPUT_MODELS     models, separated by spaces or new lines (Hub ids, local folders, bundled names)
    INPUT_TEMPLATES  template files (globs allowed), each audited with --chat-template on INPUT_TOKENIZER's tokenizer
    INPUT_TOKENIZER  the model whose tokenizer renders and encodes INPUT_TEMPLATES
    INPUT_FAIL_ON    warn | error (default error)
    INPUT_ARGS       more `tito-audit audit` options (split like a shell would)
    INPUT_SARIF      where to write the SARIF log (default tito-audit.sarif)
    INPUT_INSTALL    '' (default): pip install the action's own source (GITHUB_ACTION_PATH); 'skip': use the
                     tito-audit this Python already has; anything else: a pip requirement (`tito-audit==0.1.0`)

Exit code: that of `tito-audit audit` (0 clean, 1 findings at or above fail-on, 2 a model or template could not be
audited, 3 incomplete); with several runs (models, then each template) the first of 2, 3, 1 that any run gave. A
run that ends any other way (killed by a signal, as the kernel's OOM killer does; an exit code tito-audit never
gives; no SARIF log from a run that says it audited) audited nothing: it counts as 2 and is named on its own
`::error` line, so a model or template that was never audited cannot leave the job green.
`sarif=PATH` goes to GITHUB_OUTPUT when the log was written. Standard library only: it runs before the install.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

PRIORITY = (2, 3, 1, 0)  # tito-audit's own rule when several exit codes apply


def words(name: str) -> list[str]:
    return os.environ.get(name, "").split()


def fail(message: str) -> int:
    print(f"::error title=tito-audit::{message}")
    return 2


def install(spec: str, action_path: Path) -> int:
    if spec == "skip":
        return 0
    target = spec or str(action_path)
    print(f"pip install {target}", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", target])
    return done.returncode


def template_files(patterns: list[str]) -> list[str]:
    """Each pattern expanded as a glob (`**` included), in order, once each; a pattern matching nothing is kept, so
    that tito-audit names the missing file instead of the run passing on nothing."""
    files: dict[str, None] = {}
    for pattern in patterns:
        matched = sorted(glob.glob(pattern, recursive=True)) or [pattern]
        files.update(dict.fromkeys(matched))
    return list(files)


def audit(args: list[str], sarif: Path) -> int:
    command = [sys.executable, "-m", "tito_audit", "audit", *args, "--format", "sarif", "--output", str(sarif)]
    print("tito-audit " + shlex.join(command[3:]), flush=True)
    return subprocess.run(command).returncode


def abnormal(code: int, wrote_log: bool) -> str | None:
    """Why a run's end means nothing was audited (None: a tito-audit exit code, with its log where it has one)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the kernel's OOM killer sends SIGKILL: give the job more memory)" if name == "SIGKILL" else ""
        return f"was killed by {name}{hint}"
    if code not in PRIORITY:
        return f"exited with code {code}, which tito-audit never gives"
    if code != 2 and not wrote_log:
        return f"exited with code {code} but wrote no SARIF log"
    return None


def merged(logs: list[dict[str, Any]]) -> dict[str, Any]:
    """One SARIF run out of several runs of the same tool: code scanning takes one run per tool and category in an
    upload. Rules are united by id and every result's ruleIndex points into the united list."""
    base = json.loads(json.dumps(logs[0]))
    run = base["runs"][0]
    rules = {r["id"]: r for log in logs for r in log["runs"][0]["tool"]["driver"]["rules"]}
    run["tool"]["driver"]["rules"] = list(rules.values())
    index = {rule_id: i for i, rule_id in enumerate(rules)}
    run["results"], notifications, models, ok = [], [], [], True
    for log in logs:
        other = log["runs"][0]
        for result in other["results"]:
            run["results"].append({**result, "ruleIndex": index[result["ruleId"]]})
        for invocation in other.get("invocations", []):
            ok = ok and invocation.get("executionSuccessful", True)
            notifications += invocation.get("toolExecutionNotifications", [])
        models += other.get("properties", {}).get("models", [])
    run["invocations"] = [{"executionSuccessful": ok, "toolExecutionNotifications": notifications}]
    run["properties"] = {**run.get("properties", {}), "models": models}
    return base


def log_lines(log: dict[str, Any]) -> list[str]:
    """What the job log shows: each model's verdict with its reasons, then each result where it points."""
    run = log["runs"][0]
    lines = [
        f"{m['model']}  {m['verdict'].upper()}  {'; '.join(m.get('verdict_reasons') or [])}".rstrip()
        for m in run.get("properties", {}).get("models", [])
    ]
    for result in run["results"]:
        where = result["locations"][0]["physicalLocation"]
        place = f"{where['artifactLocation']['uri']}:{where['region']['startLine']}"
        accepted = " (suppressed)" if result.get("suppressions") else ""
        lines.append(f"  {result['level']} {result['ruleId']}{accepted} {place}: {result['message']['text']}")
    return lines


def main() -> int:
    action_path = Path(os.environ.get("GITHUB_ACTION_PATH") or Path(__file__).resolve().parents[1])
    models, templates, tokenizer = words("INPUT_MODELS"), words("INPUT_TEMPLATES"), os.environ.get("INPUT_TOKENIZER")
    fail_on = os.environ.get("INPUT_FAIL_ON", "").strip() or "error"
    extra = shlex.split(os.environ.get("INPUT_ARGS", ""))
    sarif = Path(os.environ.get("INPUT_SARIF", "").strip() or "tito-audit.sarif")
    if not models and not templates:
        return fail("give `models` or `templates`")
    if templates and not (tokenizer or "").strip():
        return fail("`templates` needs `tokenizer`: the model whose tokenizer renders and encodes them")
    if install(os.environ.get("INPUT_INSTALL", "").strip(), action_path) != 0:
        return fail("could not install tito-audit")
    bundled = action_path / "templates_cache"
    if bundled.is_dir():  # the bundled offline models, for an install that does not carry them
        os.environ.setdefault("TITO_AUDIT_TEMPLATES_CACHE", str(bundled))
    runs = ([models] if models else []) + [[tokenizer or "", "--chat-template", t] for t in template_files(templates)]
    codes, logs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for k, args in enumerate(runs):
            out = Path(tmp) / f"{k}.sarif"
            code = audit([*args, "--fail-on", fail_on, *extra], out)
            why = abnormal(code, out.is_file())
            if why is not None:  # nothing audited: never a green job
                print(f"::error title=tito-audit::{shlex.join(args)}: not audited: the run {why}")
                code = 2
            codes.append(code)
            if out.is_file():
                logs.append(json.loads(out.read_text(encoding="utf-8")))
    code = next(c for c in PRIORITY if c in codes)
    if logs:
        log = merged(logs)
        sarif.parent.mkdir(parents=True, exist_ok=True)
        sarif.write_text(json.dumps(log, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print("\n".join(log_lines(log)))
        print(f"wrote {sarif}")
        if os.environ.get("GITHUB_OUTPUT"):
            with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
                out.write(f"sarif={sarif}\n")
    print(f"tito-audit exit code {code} (--fail-on {fail_on})")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
