"""`tito-audit rl --weights` at real size on a GPU: a randomly initialised model with Qwen3-0.6B's architecture
(built from a transformers config; nothing downloaded), saved with save_pretrained and loaded through --weights.

Runs: the --control (R := B), Qwen3 (rewrites history) and Qwen2.5 (does not) with the template's own turns as
rollouts (so that "identical" depends on the template only), one sampled batch (the sampling path's cost), and
a warm-up of the small stand-in that must pass its quality gates. Records wall time, peak GPU memory and the
measured noise floor (two computations of the same B gradient) of each. Writes benchmarks/results/rl-gpu.json.

Run (on a CUDA machine): python benchmarks/bench_rl_gpu.py QWEN3_TOKENIZER_DIR QWEN25_TOKENIZER_DIR [OUT.json]
`--tiny` runs the same on CPU with a 2-layer model (a smoke test of this script); `--warmup-only
--warmup-steps=N --warmup-scenarios=a,b --seeds=0,1` runs only the stand-in warm-ups.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from tito_audit.rl import RLConfig, run_rl

# Qwen3-0.6B's published architecture (config.json of the Hub repo), used only to size the random model.
QWEN3_06B = dict(
    vocab_size=151936,
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
TINY = {**QWEN3_06B, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "head_dim": 8}


def _run(label: str, cfg: RLConfig) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    res = run_rl(cfg)
    wall = time.perf_counter() - t
    s = res.summary
    row = {
        "run": label,
        "model": Path(cfg.model).name,
        "policy": res.setup["policy"],
        "parameters": res.setup["parameters"],
        "rollouts": cfg.rollouts,
        "control": cfg.control,
        "steps": cfg.steps,
        "sequences": s["sequences"],
        "wall_seconds": wall,
        "step_seconds": [r["seconds"] for r in res.steps],
        "peak_gpu_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "noise_floor": s["noise_floor"],
        "noise_floor_per_step": [r["noise_floor"] for r in res.steps],
        "rel_error_max": s["rel_error_max"],
        "cosine_min": s["cosine_min"],
        "bitwise_equal": [r["gradient"]["bitwise_equal"] for r in res.steps],
        "corrupted": s["corrupted"],
        "tool_call_parse_rate": s["tool_call_parse_rate"],
        "sequences_affected": s["sequences_affected"],
        "mismatched_trained": s["mismatched_trained"],
    }
    if "warmup" in res.setup:
        row["warmup"] = res.setup["warmup"]
    if "quality_gates" in res.setup:
        row["quality_gates"] = res.setup["quality_gates"]
    if res.steps and "kl" in res.steps[-1]:
        kl = res.steps[-1]["kl"]
        row["kl_last_step"] = {k: kl[k] for k in kl if k.endswith(("_mean", "_se")) or k == "negative_kl"}
    if res.steps and "low_prob" in res.steps[0]:
        lp = res.steps[0]["low_prob"]
        row["low_prob_step0"] = {k: v for k, v in lp.items() if not isinstance(v, dict)} | {
            "advantage_reweighted_cosine": lp["advantage_reweighted"]["cosine"],
            "lopti": lp.get("lopti"),
        }
    if res.steps and "critical" in res.steps[0]:
        c = res.steps[0]["critical"]
        row["critical_step0"] = {k: v for k, v in c.items() if k not in ("tested", "examples")}
        row["mismatch_on_step0"] = res.steps[0]["mismatch_on"]
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "1") for a in sys.argv[1:] if a.startswith("--"))
    tiny = "tiny" in flags
    warmup_only = "warmup-only" in flags  # only the stand-in warm-ups (their own call: they take minutes)
    q3, q25 = args[0], args[1]
    out = Path(args[2]) if len(args) > 2 else Path(__file__).parent / "results" / "rl-gpu.json"
    from transformers import AutoModelForCausalLM, Qwen3Config

    device = "cpu" if tiny else "cuda"
    t = time.perf_counter()
    folder = Path(tempfile.mkdtemp()) / "qwen3-0.6b-random"
    torch.manual_seed(0)
    if not warmup_only:
        model = AutoModelForCausalLM.from_config(Qwen3Config(**(TINY if tiny else QWEN3_06B)), dtype=torch.float32)
        model.save_pretrained(folder)
        del model
    build_s = time.perf_counter() - t
    common = dict(device=device, weights=str(folder), steps=2, groups=2, group_size=4)
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_rl_gpu.py QWEN3_TOKENIZER QWEN25_TOKENIZER " + " ".join(sys.argv[3:]),
        "architecture": "Qwen3-0.6B (random init from transformers config)" if not tiny else "tiny Qwen3",
        "build_and_save_seconds": build_s,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() and not tiny else "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "runs": [],
    }

    def record(label: str, cfg: RLConfig) -> None:
        result["runs"].append(_run(label, cfg))
        out.write_text(json.dumps(result, indent=1))  # after every run: a run cut short keeps the others

    if not warmup_only:
        record("control", RLConfig(model=q3, rollouts="template", control=True, **common))
        record("qwen3", RLConfig(model=q3, rollouts="template", **common))
        record("qwen2.5", RLConfig(model=q25, rollouts="template", **common))
        record("qwen3 sampled", RLConfig(model=q3, rollouts="sample", max_new_tokens=48, **{**common, "steps": 1}))
    warm = dict(
        device=device,
        warmup=int(flags.get("warmup-steps", 40 if tiny else 1500)),
        warmup_lr=3e-3,
        hidden=32 if tiny else 256,
        layers=2 if tiny else 4,
        steps=2,
        groups=2,
        group_size=4,
        scenarios=tuple(
            flags.get("warmup-scenarios", "single_call,two_calls,system_single_call,followup_user").split(",")
        ),
    )
    for seed in [int(x) for x in flags.get("seeds", "0" if tiny else "0,1").split(",")]:
        record(f"warm-up stand-in seed {seed}", RLConfig(model=q3, seed=seed, **warm))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
