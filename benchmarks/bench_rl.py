"""`tito-audit rl` on CPU: the model-free token facts, the spread of the gradient figures over stand-in seeds
and sizes, and the cost of three full-vocabulary steps. Writes benchmarks/results/rl.json.

Run: HF_HUB_CACHE=../shared/hf-hub HF_HUB_OFFLINE=1 python benchmarks/bench_rl.py

The gradient figures describe a random stand-in model as much as the template: they are reported as the range
over 3 seeds x 2 sizes (hidden 64 / 2 layers and 256 / 4 layers), per batch (each batch trains on other
episodes). The token facts (which trained tokens R changes) do not depend on the model at all.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from tito_audit.rl import RLConfig, run_rl

MODELS = ("Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-7B-Instruct")
SIZES = ((64, 2), (256, 4))
SEEDS = (0, 1, 2)


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def main() -> None:
    # Cost: three steps with the full 151,669-id vocabulary (the setting the targets are about).
    t = time.perf_counter()
    timing = run_rl(RLConfig(model=MODELS[0], steps=3, device="cpu", vocab="full"))
    wall = time.perf_counter() - t
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    out: dict[str, Any] = {
        "command": "python benchmarks/bench_rl.py",
        "cost": {
            "model": MODELS[0],
            "steps": 3,
            "vocab": timing.setup["model_vocab"],
            "parameters": timing.setup["parameters"],
            "torch_threads": timing.setup["torch_threads"],
            "wall_seconds": wall,
            "step_seconds": [s["seconds"] for s in timing.steps],
            "setup_seconds": timing.setup["setup_seconds"],
            "max_rss_gb": rss_gb,
            "targets": {"wall_seconds_lt": 60, "max_rss_gb_lt": 6},
            "meets_targets": wall < 60 and rss_gb < 6,
            "full_vocab_batch_rel_error": [s["gradient"]["rel_error"] for s in timing.steps],
        },
        "token_facts": {},
        "gradient_spread": {},
    }
    for model in MODELS:
        runs = []
        for hidden, layers in SIZES:
            for seed in SEEDS:
                res = run_rl(RLConfig(model=model, steps=2, device="cpu", hidden=hidden, layers=layers, seed=seed))
                runs.append(
                    {
                        "hidden": hidden,
                        "layers": layers,
                        "seed": seed,
                        "cosine": [s["gradient"]["cosine"] for s in res.steps],
                        "rel_error": [s["gradient"]["rel_error"] for s in res.steps],
                        "noise_floor": res.summary["noise_floor"],
                        "corrupted": res.summary["corrupted"],
                        "batch_scenarios": [s["scenarios"] for s in res.steps],
                    }
                )
                print(model, hidden, layers, seed, runs[-1]["cosine"], runs[-1]["rel_error"], flush=True)
        facts = res.setup["token_facts"]
        out["token_facts"][model] = {k: v for k, v in facts.items() if k != "by_scenario"} | {
            "by_scenario_affected": {k: v for k, v in facts["by_scenario"].items() if v["sequences_affected"]}
        }
        per: dict[str, Any] = {"runs": runs}
        for batch in (0, 1):
            for hidden, layers in SIZES:
                sel = [r for r in runs if r["hidden"] == hidden]
                per[f"batch{batch}_{hidden}x{layers}"] = {
                    "cosine": _spread([r["cosine"][batch] for r in sel]),
                    "rel_error": _spread([r["rel_error"][batch] for r in sel]),
                }
        per["corrupted_in_every_run"] = all(r["corrupted"] for r in runs)
        per["identical_in_every_run"] = not any(r["corrupted"] for r in runs)
        out["gradient_spread"][model] = per
    # A warm-up that passes its quality gates (two scenarios, 300 SFT steps), and what it then shows.
    t = time.perf_counter()
    warm = run_rl(
        RLConfig(model=MODELS[0], warmup=300, steps=2, device="cpu", scenarios=("single_call/plain", "two_calls/plain"))
    )
    last = warm.steps[-1]
    out["warmup_that_passes"] = {
        "command": "tito-audit rl Qwen/Qwen3-0.6B --warmup 300 --steps 2 --scenario single_call/plain "
        "--scenario two_calls/plain",
        "wall_seconds": time.perf_counter() - t,
        "warmup": warm.setup["warmup"],
        "quality_gates": warm.setup["quality_gates"],
        "kl_batch1": {
            k: v for k, v in last.get("kl", {}).items() if k.endswith(("_mean", "_se")) or k == "negative_kl"
        },
        "low_prob_batch1": {k: v for k, v in last.get("low_prob", {}).items() if not isinstance(v, dict | list)}
        | {"lopti": last.get("low_prob", {}).get("lopti")},
        "critical_batch1": {k: v for k, v in last.get("critical", {}).items() if k not in ("tested", "examples")},
        "mismatch_on_batch1": last.get("mismatch_on"),
        "rel_error": [s["gradient"]["rel_error"] for s in warm.steps],
    }
    # Compacted versus full vocabulary: two different stand-in models, so not the same gradient figure.
    compact = run_rl(RLConfig(model=MODELS[0], steps=1, device="cpu"))
    out["compact_vs_full_batch0_rel_error"] = {
        "compact": compact.steps[0]["gradient"]["rel_error"],
        "full": timing.steps[0]["gradient"]["rel_error"],
    }
    out["machine"] = {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()}
    path = Path(__file__).parent / "results" / "rl.json"
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "gradient_spread"}, indent=1)[:4000])


if __name__ == "__main__":
    main()
