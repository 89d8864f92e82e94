"""`tito-audit audit` (the default options: every scenario, the search's default budget) before and after a
change, runs alternating in fresh processes so that both sides see the same machine load.

    python benchmarks/bench_audit_paired.py --before REF [--models qwen3-0.6b qwen2.5-7b-instruct] [--pairs 3]
    python benchmarks/bench_audit_paired.py --before REF --bundled --each [--pairs 3]

``REF``'s tree is exported (``git archive``, bench_scan_paired.export); the working tree is the "after" side.
``--bundled``: every bundled model (templates_cache/index.json). ``--each``: one process per model and side
(before, after, before, after... within each pair, model by model), so that each model gets its own ratio;
without it one process audits all the models. Writes benchmarks/results/NAME.json: per run wall and CPU seconds
and the exit status, per side the medians and the after/before ratios (per model with ``--each``, and overall:
the per-pair sums of the models' seconds), with the load average before every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan_paired import export
from measure import ROOT, _run_once, machine, write

KEYS = ("wall_seconds", "cpu_seconds")


def bundled() -> list[str]:
    """The bundled models' names, as the index lists them (read here: the benchmark runs both trees' CLIs)."""
    return list(json.loads((ROOT / "templates_cache" / "index.json").read_text()))


def audit_once(tree: Path, models: list[str]) -> dict[str, Any]:
    cmd = f"cd {tree} && PYTHONPATH={tree} exec {sys.executable} -m tito_audit audit {' '.join(models)} --format json"
    load = [round(x, 2) for x in os.getloadavg()]
    run = _run_once(["sh", "-c", cmd + " > /dev/null"], 1800, sample=False)
    run["load_average_before"] = load
    return run


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {
        side: {k: round(statistics.median(r[k] for r in runs if r["side"] == side), 3) for k in KEYS}
        for side in ("before", "after")
    }


def ratios(med: dict[str, dict[str, float]]) -> dict[str, float]:
    return {
        "median_wall_after_over_before": round(med["after"]["wall_seconds"] / med["before"]["wall_seconds"], 3),
        "median_cpu_after_over_before": round(med["after"]["cpu_seconds"] / med["before"]["cpu_seconds"], 3),
    }


def per_model(runs: list[dict[str, Any]], models: list[str], pairs: int) -> dict[str, Any]:
    """Each model's medians and ratios, and overall: per pair and side, the sum over the models."""
    out: dict[str, Any] = {}
    for model in models:
        med = medians([r for r in runs if r["model"] == model])
        out[model] = {"median": med, **ratios(med)}
    totals = [
        {"side": side, **{k: sum(r[k] for r in runs if r["side"] == side and r["pair"] == i) for k in KEYS}}
        for i in range(pairs)
        for side in ("before", "after")
    ]
    med = medians(totals)
    wall_ratios = [
        round(a["wall_seconds"] / b["wall_seconds"], 3) for b, a in zip(totals[::2], totals[1::2], strict=True)
    ]
    out["overall"] = {
        "meaning": "per pair and side, the seconds of all the models summed; the medians of those sums",
        "wall_after_over_before_per_pair": wall_ratios,
        "median": med,
        **ratios(med),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--models", nargs="+", default=["qwen3-0.6b", "qwen2.5-7b-instruct"])
    ap.add_argument("--bundled", action="store_true", help="every bundled model (instead of --models)")
    ap.add_argument("--each", action="store_true", help="one process per model (per-model ratios)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--name", default="audit-paired")
    args = ap.parse_args()
    models = bundled() if args.bundled else args.models
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": export(args.before, Path(tmp) / "before"), "after": ROOT}
        for i in range(args.pairs):
            for group in [[m] for m in models] if args.each else [models]:
                for side, tree in trees.items():
                    run = audit_once(tree, group)
                    run.update(side=side, pair=i, model=" ".join(group))
                    runs.append(run)
                    print(
                        f"{side} {i} {run['model']}: {run['wall_seconds']}s wall, {run['cpu_seconds']}s CPU, "
                        f"rc {run['rc']}",
                        flush=True,
                    )
    med = medians(runs)
    result: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(["python", "benchmarks/bench_audit_paired.py", *sys.argv[1:]]),
        "models": models,
        "runs": runs,
        "median": med,
        **ratios(med),
    }
    if args.each:
        result.pop("median")
        for key in ratios(med):
            result.pop(key)
        result["per_model"] = per_model(runs, models, args.pairs)
        result.update({k: v for k, v in result["per_model"]["overall"].items() if k.startswith("median_")})
    print(json.dumps({k: v for k, v in result.items() if k.startswith("median_")}))
    print(write(args.name, result))


if __name__ == "__main__":
    main()
