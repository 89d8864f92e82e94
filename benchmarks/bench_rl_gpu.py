"""`tito-audit rl --weights` at real size on one GPU: peak memory per parameter, time per step, noise floor.

Runs on a CUDA machine with nothing but this repository: templates and tokenizers come from ``templates_cache/``
(the bundled ``qwen3-0.6b`` and ``qwen2.5-7b-instruct``), models are randomly initialised from transformers
configs (Qwen3-0.6B's and Qwen2.5-7B's published architectures; nothing is downloaded).

1. Qwen3-0.6B architecture, float32, saved with ``save_pretrained`` and loaded through ``--weights``, template
   rollouts (``--rollouts template``: "identical" then depends on the template only), 2 steps of 8 sequences:
   ``--control`` (R := B), the Qwen3 template (rewrites history) and the Qwen2.5 template (does not); then one
   sampled batch (batched sampling with padding, 48 new tokens per turn) and the Qwen3 template in bfloat16.
2. Qwen2.5-7B architecture in bfloat16 on the Qwen2.5 template, 1 step: the size the memory goal is about
   (<= 10 bytes per parameter beyond the weights, so that 7B fits on one 80 GB GPU). Built on the GPU and handed to
   the loop in memory (writing and reading 15 GB would cost a minute of the budget); the loop is the same.

Each run records wall time, seconds per step, ``torch.cuda.max_memory_allocated`` (reset before the run), peak
bytes per parameter beyond the weights, the measured noise floor and the verdict. Results are written after every
run to benchmarks/results/rl-gpu.json; a run that fails records its error and the others go on.

Run (about 5 minutes on an H100): python benchmarks/bench_rl_gpu.py
``--tiny`` runs the same plan on CPU with 2-layer, 32-wide models (a smoke test of this script);
``--skip-7b`` leaves out the 7B run; ``--out=PATH`` writes elsewhere.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from tito_audit.policy.model import VocabMap
from tito_audit.rl import RLConfig, run_rl
from tito_audit.rl import loop as rl_loop

QWEN3_TEMPLATE, QWEN25_TEMPLATE = "qwen3-0.6b", "qwen2.5-7b-instruct"
# The published architectures (config.json of the Hub repos), used only to size the random models.
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
QWEN25_7B = dict(
    vocab_size=152064,
    hidden_size=3584,
    intermediate_size=18944,
    num_hidden_layers=28,
    num_attention_heads=28,
    num_key_value_heads=4,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)
TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def _row(label: str, cfg: RLConfig, started: float, res: Any) -> dict[str, Any]:
    s, setup = res.summary, res.setup
    return {
        "run": label,
        "template": cfg.model,
        "policy": setup["policy"],
        "dtype": setup["dtype"],
        "parameters": setup["parameters"],
        "weights_gb": setup["weights_bytes"] / 2**30,
        "rollouts": cfg.rollouts,
        "control": cfg.control,
        "steps": cfg.steps,
        "sequences_per_step": cfg.groups * cfg.group_size,
        "wall_seconds": time.perf_counter() - started,
        "step_seconds": [r["seconds"] for r in res.steps],
        "sample_seconds": [r["sample_seconds"] for r in res.steps],
        "peak_gpu_memory_gb": s.get("peak_gpu_memory_gb"),
        "peak_bytes_per_parameter_beyond_weights": s.get("peak_bytes_per_parameter_beyond_weights"),
        "noise_floor": s["noise_floor"],
        "rel_error_max": s["rel_error_max"],
        "cosine_min": s["cosine_min"],
        "bitwise_equal": [r["gradient"]["bitwise_equal"] for r in res.steps],
        "verdict": s["verdict"],
        "exit_code": s["exit_code"],
        "sequences_affected": s["sequences_affected"],
        "mismatched_trained": s["mismatched_trained"],
        "parse_rate_batches": s["parse_rate_batches"],
        "sampler_vs_trainer_abs_dlogp_max": [
            r.get("sampler_vs_trainer", {}).get("abs_dlogp_max") for r in res.steps if "sampler_vs_trainer" in r
        ],
    }


def _in_memory(model: Any) -> Any:
    """``load_weights`` replaced for one run: the model built on the device, with the tokenizer-size check."""

    def load(path: str, device: torch.device, tokenizer_size: int, dtype: torch.dtype = torch.float32) -> Any:
        rows = model.get_input_embeddings().weight.shape[0]
        assert rows >= tokenizer_size
        return model, VocabMap.full(rows, valid=tokenizer_size)

    return load


def main() -> None:
    flags = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "1") for a in sys.argv[1:] if a.startswith("--"))
    tiny = "tiny" in flags
    out = Path(flags.get("out", Path(__file__).parent / "results" / ("rl-gpu-tiny.json" if tiny else "rl-gpu.json")))
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    device = "cpu" if tiny else "cuda"
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_rl_gpu.py " + " ".join(sys.argv[1:]),
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "gpu_memory_gb": torch.cuda.get_device_properties(0).total_memory / 2**30 if device == "cuda" else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "runs": [],
    }

    def record(label: str, cfg: RLConfig, load: Any = None) -> None:
        original = rl_loop.load_weights
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        try:
            if load is not None:
                rl_loop.load_weights = load
            row = _row(label, cfg, started, run_rl(cfg))
        except Exception as exc:  # one failed run must not cost the others
            row = {"run": label, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        finally:
            rl_loop.load_weights = original
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
        result["runs"].append(row)
        out.write_text(json.dumps(result, indent=1))  # after every run: a run cut short keeps the others

    t = time.perf_counter()
    folder = Path(tempfile.mkdtemp()) / "qwen3-0.6b-random"
    torch.manual_seed(0)
    small = AutoModelForCausalLM.from_config(Qwen3Config(**(QWEN3_06B | (TINY if tiny else {}))), dtype=torch.float32)
    small.save_pretrained(folder)
    del small
    result["build_and_save_06b_seconds"] = time.perf_counter() - t
    common = dict(device=device, weights=str(folder), steps=2, groups=2, group_size=4, rollouts="template")
    record("0.6B control (R := B), Qwen3 template", RLConfig(model=QWEN3_TEMPLATE, control=True, **common))
    record("0.6B Qwen3 template", RLConfig(model=QWEN3_TEMPLATE, **common))
    record("0.6B Qwen2.5 template", RLConfig(model=QWEN25_TEMPLATE, **common))
    record(
        "0.6B Qwen3 template, bfloat16",
        RLConfig(model=QWEN3_TEMPLATE, dtype="bfloat16", **common),
    )
    record(
        "0.6B Qwen3, one sampled batch",
        RLConfig(model=QWEN3_TEMPLATE, max_new_tokens=48, **{**common, "steps": 1, "rollouts": "sample"}),
    )
    if "skip-7b" not in flags:
        t = time.perf_counter()
        torch.manual_seed(0)
        with torch.device(device):
            big = AutoModelForCausalLM.from_config(
                Qwen2Config(**(QWEN25_7B | (TINY if tiny else {}))), dtype=torch.bfloat16
            )
        result["build_7b_seconds"] = time.perf_counter() - t
        record(
            "7B (Qwen2.5-7B architecture) Qwen2.5 template, bfloat16",
            RLConfig(
                model=QWEN25_TEMPLATE,
                dtype="bfloat16",
                **{**common, "steps": 1, "weights": "in-memory Qwen2.5-7B architecture (random)"},
            ),
            load=_in_memory(big),
        )
        del big
    result["total_seconds"] = sum(r.get("wall_seconds", 0.0) for r in result["runs"])
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
