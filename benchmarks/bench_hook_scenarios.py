"""What the pre-commit hook `tito-audit-templates` costs per commit with the full scenario set, against the quick one.

    python benchmarks/bench_hook_scenarios.py      # -> benchmarks/results/hook-scenarios.json

The hook's own command (its `entry` and `args` from .pre-commit-hooks.yaml, `--scenarios` set to each mode) on
one changed template, each run in a fresh process (``measure.timed``), alternating the modes, three runs each:
Qwen2.5's and Qwen3's bundled templates, and tests/data/hook/minifies-old-json-results.jinja (Qwen2.5's plus a
rule that minifies the JSON tool results of earlier tool rounds, which only the full set catches). Building the
hook's environment is separate and once per `rev` (bench_pre_commit.py). Reported: median CPU and wall seconds per
mode and template, the ratio full/quick, and each mode's exit code (1: the hook fails the commit).
"""

from __future__ import annotations

import shlex
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import yaml
from measure import ROOT, machine, timed, write

TEMPLATES = {
    "qwen2.5-7b-instruct": ROOT / "templates_cache" / "qwen2.5-7b-instruct" / "chat_template.jinja",
    "qwen3-0.6b": ROOT / "templates_cache" / "qwen3-0.6b" / "chat_template.jinja",
    "minifies-old-json-results": ROOT / "tests" / "data" / "hook" / "minifies-old-json-results.jinja",
}
RUNS = 3


def hook_command(mode: str, template: Path) -> list[str]:
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))}
    hook = hooks["tito-audit-templates"]
    entry = shlex.split(hook["entry"])
    entry[entry.index("--scenarios") + 1] = mode
    return [sys.executable, "-m", "tito_audit", *entry[1:], *hook["args"], str(template)]


def main() -> None:
    at_start = machine()
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in TEMPLATES.items():
            template = Path(tmp) / f"{name}.jinja"
            shutil.copy(source, template)
            runs: dict[str, list[dict[str, object]]] = {"quick": [], "full": []}
            for _ in range(RUNS):
                for mode in runs:
                    runs[mode].append(timed(hook_command(mode, template)))
            summary: dict[str, object] = {}
            for mode, timings in runs.items():
                summary[mode] = {
                    "cpu_seconds_median": statistics.median(float(t["cpu_seconds"]) for t in timings),  # type: ignore[arg-type]
                    "wall_seconds_median": statistics.median(float(t["wall_seconds"]) for t in timings),  # type: ignore[arg-type]
                    "exit_codes": [t["rc"] for t in timings],
                    "command": timings[0]["command"],
                }
            quick, full = summary["quick"], summary["full"]
            summary["full_over_quick_cpu"] = round(full["cpu_seconds_median"] / quick["cpu_seconds_median"], 3)  # type: ignore[index]
            results[name] = summary
    print(write("hook-scenarios", {"machine": at_start, "runs_per_mode": RUNS, "templates": results}))


if __name__ == "__main__":
    main()
