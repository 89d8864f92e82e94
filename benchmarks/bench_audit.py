"""Audit timings: one model with all checks, cold (fresh process: imports, tokenizer load) and warm; then the shared
model set (the 9 repos of the Hub cache) with `tito-audit audit`, one model at a time and in parallel.

    python benchmarks/bench_audit.py [--model Qwen/Qwen3-0.6B] [--repeat 5] [--jobs 2]

Writes benchmarks/results/audit.json. Every measurement is its own process (see measure.py for what is measured).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ENV, machine, python, run, write

from tito_audit.cli.table import cached_models

# Every model repo in the shared Hub cache, found the way `tito-audit table --cached` finds them.
SHARED_MODELS = cached_models(ENV["HF_HUB_CACHE"])

# Phases of one model in one fresh process. "first" is the first audit after loading (every cache cold but the
# process-wide ones); "repeat" audits the same loaded model again (tokenizer-level caches warm, as in a scan).
_ONE_MODEL = """
import json, sys, time
t0 = time.perf_counter()
from tito_audit import audit_model, load
t1 = time.perf_counter()
model = load(sys.argv[1])
t2 = time.perf_counter()
report = audit_model(model)
t3 = time.perf_counter()
repeats = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    again = audit_model(model)
    repeats.append(time.perf_counter() - t)
    assert again.verdict == report.verdict
print(json.dumps({"model": sys.argv[1], "verdict": report.verdict, "checks": len(report.checks),
                  "scenarios_played": report.scenarios["played"], "import_seconds": t1 - t0,
                  "load_seconds": t2 - t1, "first_audit_seconds": t3 - t2, "repeat_audit_seconds": repeats}))
"""


def one_model(model: str, repeat: int) -> dict:
    phases = run(python(_ONE_MODEL, model, str(repeat)))
    phases["command"] = f"python -c <load, audit, audit again x{repeat}> {model}"
    out = phases.pop("output", {})
    repeats = out.pop("repeat_audit_seconds", [])
    cli = run([sys.executable, "-m", "tito_audit", "audit", model, "-q"])
    return {
        "model": model,
        **{k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()},
        "repeat_audit_seconds_median": round(statistics.median(repeats), 3) if repeats else None,
        "in_process": phases,
        "cli_cold": cli,  # `tito-audit audit MODEL -q` end to end: interpreter, imports, load, audit, report
    }


def shared_set(jobs: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "tito_audit", "audit", *SHARED_MODELS, "--jobs", str(jobs)]
        result = run([*cmd, "--format", "json", "--output", str(out), "-q"])
        if out.is_file():
            import json

            report = json.loads(out.read_text())
            result["verdicts"] = {m["model"]: m["verdict"] for m in report["models"]}
            result["audit_seconds"] = {m["model"]: m["seconds"] for m in report["models"]}
    result["jobs"] = jobs
    result["models"] = len(SHARED_MODELS)
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="workers for the parallel shared-set run")
    args = ap.parse_args()
    results = {"machine": machine(), "command": "python benchmarks/bench_audit.py " + " ".join(sys.argv[1:])}
    results["one_model"] = one_model(args.model, args.repeat)
    print(f"one model: {results['one_model']}", flush=True)
    results["shared_set_sequential"] = shared_set(1)
    print(f"shared set, --jobs 1: {results['shared_set_sequential']['wall_seconds']}s", flush=True)
    results["shared_set_parallel"] = shared_set(args.jobs)
    print(f"shared set, --jobs {args.jobs}: {results['shared_set_parallel']['wall_seconds']}s", flush=True)
    print(write("audit", results))


if __name__ == "__main__":
    main()
