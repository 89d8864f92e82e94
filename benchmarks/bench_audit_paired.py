"""`tito-audit audit` (the full scenario set) before and after a change, runs alternating in fresh processes so
that both sides see the same machine load.

    python benchmarks/bench_audit_paired.py --before REF [--models qwen3-0.6b qwen2.5-7b-instruct] [--pairs 3]

``REF``'s tree is exported (``git archive``, bench_scan_paired.export); the working tree is the "after" side.
Writes benchmarks/results/NAME.json: per run wall and CPU seconds and the verdicts, per side the medians and
the after/before ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan_paired import export
from measure import ROOT, _run_once, machine, write


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--models", nargs="+", default=["qwen3-0.6b", "qwen2.5-7b-instruct"])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--name", default="audit-paired")
    args = ap.parse_args()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": export(args.before, Path(tmp) / "before"), "after": ROOT}
        for i in range(args.pairs):
            for side, tree in trees.items():
                models = " ".join(args.models)
                cmd = f"cd {tree} && PYTHONPATH={tree} exec {sys.executable} -m tito_audit audit {models} --format json"
                run = _run_once(["sh", "-c", cmd + " > /dev/null"], 1800, sample=False)
                run.update(side=side, pair=i)
                runs.append(run)
                print(f"{side} {i}: {run['wall_seconds']}s wall, {run['cpu_seconds']}s CPU", flush=True)
    med = {
        side: {k: statistics.median(r[k] for r in runs if r["side"] == side) for k in ("wall_seconds", "cpu_seconds")}
        for side in ("before", "after")
    }
    result = {
        "machine": machine(),
        "command": " ".join(["python", "benchmarks/bench_audit_paired.py", *sys.argv[1:]]),
        "models": args.models,
        "runs": runs,
        "median": med,
        "median_wall_after_over_before": round(med["after"]["wall_seconds"] / med["before"]["wall_seconds"], 3),
        "median_cpu_after_over_before": round(med["after"]["cpu_seconds"] / med["before"]["cpu_seconds"], 3),
    }
    print(write(args.name, result))


if __name__ == "__main__":
    main()
