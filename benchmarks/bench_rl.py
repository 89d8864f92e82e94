"""`tito-audit rl` on CPU: verdicts and token facts, the gradient figures over stand-in seeds and sizes, where the
old spread of the cosine came from, a warm-up that passes its gates, and the cost of full-vocabulary steps.
Writes benchmarks/results/rl.json.

Run: HF_HUB_CACHE=../shared/hf-hub HF_HUB_OFFLINE=1 python benchmarks/bench_rl.py
(``--part=kl`` runs only ``kl_power_study``, ``--part=verdicts`` only the shared models' verdicts and the
non-canonical run, and merges them into the existing rl.json.)

The verdict's comparison uses a fixed advantage (A = 1 for every sequence). ``reward_seed_study`` shows why: the
same batch compared with GRPO advantages from random rewards (what template mode draws) gives a cosine that moves
with the reward seed, while the fixed-advantage cosine moves only with the stand-in model.
"""

from __future__ import annotations

import json
import os
import platform
import random
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from tito_audit.policy.gradient_compare import compare
from tito_audit.policy.gradients import view_gradient
from tito_audit.policy.model import VocabMap, build_small_model
from tito_audit.rl import RLConfig, run_rl
from tito_audit.rl.episodes import assign_groups, group_advantages
from tito_audit.rl.template_episodes import TemplateEpisodes, used_ids

MODELS = ("Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-7B-Instruct")
SIZES = ((64, 2), (256, 4))
SEEDS = (0, 1, 2)


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def reward_seed_study(model: str) -> dict[str, Any]:
    """Batch 0 of template mode (8 episodes, 2 groups of 4), B against R: with GRPO advantages from random rewards
    (reward seeds 0-3) and with A = 1, for stand-in seeds 0-2 (hidden 64, 2 layers)."""
    template = TemplateEpisodes(RLConfig(model=model))
    eps = template.episodes[:8]
    vmap = VocabMap.compact(used_ids(template.episodes, template.stops))
    rows = []
    for model_seed in SEEDS:
        policy = build_small_model(vmap.size, seed=model_seed)
        fixed = compare(
            view_gradient(policy, vmap, [e.buffer for e in eps], [1.0] * 8).grads,
            view_gradient(policy, vmap, [e.naive for e in eps], [1.0] * 8).grads,
        )
        for reward_seed in range(4):
            rng = random.Random(reward_seed)
            for e in eps:
                e.reward = rng.random()
            assign_groups(eps, 4)
            adv = group_advantages(eps)
            grpo = compare(
                view_gradient(policy, vmap, [e.buffer for e in eps], adv).grads,
                view_gradient(policy, vmap, [e.naive for e in eps], adv).grads,
            )
            rows.append(
                {
                    "model_seed": model_seed,
                    "reward_seed": reward_seed,
                    "cosine_grpo_advantages": grpo.cosine,
                    "cosine_fixed_advantage": fixed.cosine,
                    "rel_error_fixed_advantage": fixed.rel_error,
                }
            )
            print("reward study", rows[-1], flush=True)
    return {"model": model, "batch": [e.scenario_id for e in eps], "rows": rows}


def kl_power_study() -> dict[str, Any]:
    """The KL section with a reference that is not the policy: a 300-step warm-up (seed 1, passes its gates) as
    the policy, the 150-step warm-up of the same seed as ``--ref``; one batch under pure sampling, top_k = 2 and
    top_p = 0.9 (the exact bias needs no sampling noise: it is exact at every visited position)."""
    import tempfile

    folder = Path(tempfile.mkdtemp())
    scen = ("single_call/plain", "two_calls/plain")
    for steps, name in ((300, "policy"), (150, "ref")):
        run_rl(RLConfig(model=MODELS[0], warmup=steps, seed=1, steps=1, scenarios=scen, save_policy=str(folder / name)))
    out: dict[str, Any] = {
        "commands": [
            "tito-audit rl Qwen/Qwen3-0.6B --warmup 300 --seed 1 --steps 1 --scenario single_call/plain "
            "--scenario two_calls/plain --save-policy POLICY (and --warmup 150 ... --save-policy REF)",
            "tito-audit rl POLICY --weights POLICY --ref REF --seed 1 --steps 1 --scenario single_call/plain "
            "--scenario two_calls/plain [--generation-kwargs SETTINGS]",
        ],
        "runs": {},
    }
    for label, kwargs in (("pure", None), ("top_k=2", '{"top_k": 2}'), ("top_p=0.9", '{"top_p": 0.9}')):
        res = run_rl(
            RLConfig(
                model=str(folder / "policy"),
                weights=str(folder / "policy"),
                ref=str(folder / "ref"),
                seed=1,
                steps=1,
                scenarios=scen,
                generation_kwargs=kwargs,
            )
        )
        kl = res.steps[0].get("kl", {})
        out["runs"][label] = {
            "quality_gates_passed": res.setup["quality_gates"]["passed"],
            "estimators": {
                k: kl.get(k) for k in kl if k.endswith(("_mean", "_se")) or k in ("negative_kl", "significance")
            },
            "bias": kl.get("bias"),
            "what_to_do": res.summary["what_to_do"],
        }
        print("kl", label, out["runs"][label]["bias"], flush=True)
    return out


def verdicts() -> dict[str, Any]:
    """Every shared model, 2 steps: verdict, exit code, token facts (totals and per thinking mode), parse rates; and
    Qwen2.5 with --noncanonical-rate 0.05."""
    out: dict[str, Any] = {"verdicts": {}}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from conftest import SHARED_MODELS  # the nine models of the shared Hub cache

    for model in SHARED_MODELS:
        res = run_rl(RLConfig(model=model, steps=2, device="cpu"))
        s, facts = res.summary, res.setup["token_facts"]
        out["verdicts"][model] = {
            "verdict": s["verdict"],
            "exit_code": s["exit_code"],
            "reasons": s["reasons"],
            "holds_for": s["holds_for"],
            "rel_error_max": s["rel_error_max"],
            "parse_rate_every_scenario": s["parse_rate_every_scenario"],
            "parse_rate_batches": s["parse_rate_batches"],
            "thinking_modes": res.setup["coverage"]["thinking_modes"],
            "token_facts": {k: v for k, v in facts.items() if k != "by_scenario"},
            "batch_sequences_affected": [st["alignment"]["sequences_affected"] for st in res.steps],
        }
        print(model, out["verdicts"][model]["verdict"], flush=True)
    q25 = run_rl(RLConfig(model=MODELS[1], steps=2, device="cpu", noncanonical_rate=0.05))
    out["noncanonical_0.05"] = {
        "model": MODELS[1],
        "verdict": q25.summary["verdict"],
        "rel_error_max": q25.summary["rel_error_max"],
        "holds_for": q25.summary["holds_for"],
        "token_facts": {k: v for k, v in q25.setup["token_facts"].items() if k not in ("by_scenario", "by_mode")},
    }
    return out


def main() -> None:
    path = Path(__file__).parent / "results" / "rl.json"
    parts = {"--part=kl": lambda: {"kl_power_study": kl_power_study()}, "--part=verdicts": verdicts}
    chosen = [part for arg, part in parts.items() if arg in sys.argv]
    if chosen:  # only these sections, merged into the existing results
        merged = json.loads(path.read_text())
        for part in chosen:
            merged.update(part())
        path.write_text(json.dumps(merged, indent=1, default=str))
        return
    out: dict[str, Any] = {"command": "python benchmarks/bench_rl.py"}
    # Cost: three steps with the full 151,669-id vocabulary.
    t = time.perf_counter()
    timing = run_rl(RLConfig(model=MODELS[0], steps=3, device="cpu", vocab="full"))
    wall = time.perf_counter() - t
    out["cost"] = {
        "model": MODELS[0],
        "steps": 3,
        "vocab": timing.setup["model_vocab"],
        "parameters": timing.setup["parameters"],
        "torch_threads": timing.setup["torch_threads"],
        "wall_seconds": wall,
        "step_seconds": [s["seconds"] for s in timing.steps],
        "setup_seconds": timing.setup["setup_seconds"],
        "max_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024,
        "full_vocab_batch_rel_error": [s["gradient"]["rel_error"] for s in timing.steps],
    }
    out.update(verdicts())
    # The fixed-advantage gradient figures over stand-in seeds and sizes, per batch.
    out["gradient_spread"] = {}
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
                        "verdict": res.summary["verdict"],
                    }
                )
                print(model, hidden, layers, seed, runs[-1]["cosine"], runs[-1]["rel_error"], flush=True)
        per: dict[str, Any] = {"runs": runs}
        for batch in (0, 1):
            for hidden, layers in SIZES:
                sel = [r for r in runs if r["hidden"] == hidden]
                per[f"batch{batch}_{hidden}x{layers}"] = {
                    "cosine": _spread([r["cosine"][batch] for r in sel]),
                    "rel_error": _spread([r["rel_error"][batch] for r in sel]),
                }
        per["verdicts"] = sorted({r["verdict"] for r in runs})
        out["gradient_spread"][model] = per
    out["reward_seed_study"] = reward_seed_study(MODELS[0])
    # Warm-ups of two scenarios, 300 SFT steps, seeds 0-2: the quality gates decide on the first sampled batch.
    out["warmups"] = []
    for seed in SEEDS:
        t = time.perf_counter()
        warm = run_rl(
            RLConfig(
                model=MODELS[0],
                warmup=300,
                seed=seed,
                steps=2,
                device="cpu",
                scenarios=("single_call/plain", "two_calls/plain"),
            )
        )
        last = warm.steps[-1]
        out["warmups"].append(
            {
                "command": f"tito-audit rl Qwen/Qwen3-0.6B --warmup 300 --seed {seed} --steps 2 "
                "--scenario single_call/plain --scenario two_calls/plain",
                "wall_seconds": time.perf_counter() - t,
                "warmup": warm.setup["warmup"],
                "quality_gates": warm.setup["quality_gates"],
                "verdict": warm.summary["verdict"],
                "rel_error": [s["gradient"]["rel_error"] for s in warm.steps],
                "batch1": {k: last.get(k) for k in ("kl", "low_prob", "updates", "mismatch_on")}
                | {"critical": {k: v for k, v in last.get("critical", {}).items() if k not in ("tested", "examples")}},
            }
        )
        print("warm-up seed", seed, warm.setup["quality_gates"]["passed"], flush=True)
    # Compacted versus full vocabulary: two different stand-in models, so not the same gradient figure.
    compact = run_rl(RLConfig(model=MODELS[0], steps=1, device="cpu"))
    out["compact_vs_full_batch0_rel_error"] = {
        "compact": compact.steps[0]["gradient"]["rel_error"],
        "full": timing.steps[0]["gradient"]["rel_error"],
    }
    out["kl_power_study"] = kl_power_study()
    out["machine"] = {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()}
    path.write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
