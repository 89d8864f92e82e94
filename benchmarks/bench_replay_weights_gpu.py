"""`tito-audit replay --weights` at real size on one GPU: episodes per second, peak memory, what it finds.

Runs on a CUDA machine with nothing but this repository: templates and tokenizers come from ``templates_cache/``
(the bundled ``qwen3-0.6b`` and ``qwen2.5-7b-instruct``), models are randomly initialised from transformers configs
(Qwen3-0.6B's and Qwen2.5-7B's published architectures, ``bench_rl_gpu``'s; nothing is downloaded) and built on
the GPU, handed to ``analyze_pairs`` in memory (the code ``replay --weights`` runs after loading). The logs are the
audit's scenarios played on each template (a sampler splitting a token in 30 % of the turns), with every turn's
``prompt_ids`` and the engine's log-probs written by the policy itself in bfloat16; two loops, ``correct`` and
``naive_retokenize``.

1. Qwen3-0.6B architecture, float32 policy, bf16 engine (numeric drift), ``--ref`` another random 0.6B, sampler
   ``top_k=20``: the attribution alone batched and one sequence per forward (the speed-up of batching on a GPU),
   then everything (estimators and the per-episode gradient comparison).
2. The same in bfloat16 (policy and engine the same bf16 model).
3. Qwen2.5-7B architecture in bfloat16, ``top_k=20`` without a reference (truncated mass only: a second 7B would
   cost 15 GB), gradient comparison on.

Each run records wall seconds, episodes per second, the split (forward, estimators, gradient),
``torch.cuda.max_memory_allocated`` (reset before the run) and bytes per parameter beyond the weights, and what it
found. Results are written to OUT after every run; a run that fails records its error and the others go on; a run
that would start past ``--budget`` seconds (default 180) is recorded as skipped, so that the script ends within
about four minutes on one H100 or H200 (no run was measured longer than the margin left).

Run: PYTHONPATH=$PWD python benchmarks/bench_replay_weights_gpu.py OUT.json
``--tiny``: the same plan on CPU with 2-layer, 32-wide models and 6 episodes (a smoke test of this script);
``--episodes=N`` (default 32; the 7B run takes half), ``--skip-7b``, ``--budget=SECONDS``.
"""

from __future__ import annotations

import copy
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from bench_replay_weights import engine_records, pairs_of, played, summary  # noqa: E402
from bench_rl_gpu import QWEN3_06B, QWEN25_7B, TINY  # noqa: E402

QWEN3_TEMPLATE, QWEN25_TEMPLATE = "qwen3-0.6b", "qwen2.5-7b-instruct"
LOOPS = ("correct", "naive_retokenize")


def main() -> None:
    flags = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "1") for a in sys.argv[1:] if a.startswith("--"))
    paths = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(paths) != 1:
        sys.exit("usage: python benchmarks/bench_replay_weights_gpu.py OUT.json [--tiny] [--episodes=N] [--skip-7b]")
    out = Path(paths[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    tiny = "tiny" in flags
    n_eps = int(flags.get("episodes", 6 if tiny else 32))
    budget = float(flags.get("budget", 180))
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen3Config

    from tito_audit.policy.generation import GenerationSettings
    from tito_audit.policy.model import VocabMap
    from tito_audit.replay.weights import Policy, analyze_pairs

    device = torch.device("cpu" if tiny else "cuda")
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_replay_weights_gpu.py " + " ".join(sys.argv[1:]),
        "transformers": __import__("transformers").__version__,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "gpu_memory_gb": torch.cuda.get_device_properties(0).total_memory / 2**30 if device.type == "cuda" else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "runs": [],
    }
    started_all = time.perf_counter()

    def save() -> None:
        result["total_seconds"] = time.perf_counter() - started_all
        out.write_text(json.dumps(result, indent=1))

    def build(cls: Any, arch: dict[str, Any], dtype: torch.dtype, seed: int) -> Any:
        torch.manual_seed(seed)
        with torch.device(device):
            return AutoModelForCausalLM.from_config(cls(**(arch | (TINY if tiny else {}))), dtype=dtype).eval()

    def record(label: str, model: Any, ref: Any, logs: dict[str, Any], ctx: Any, vocab: int, **kw: Any) -> None:
        settings = kw.pop("settings", None)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        parameters = sum(p.numel() for p in model.parameters())
        for loop in LOOPS:
            row: dict[str, Any] = {"run": label, "loop": loop, "parameters": parameters}
            if time.perf_counter() - started_all > budget:
                row["skipped"] = f"past the time budget ({budget:g} s)"
                result["runs"].append(row)
                save()
                continue
            try:
                pairs = pairs_of(logs[loop], ctx, settings)
                vmap = VocabMap.full(model.get_input_embeddings().weight.shape[0], valid=vocab)
                policy = Policy.of(model, vmap, ref, stop_ids=ctx.stop_ids, **kw)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                started = time.perf_counter()
                t = analyze_pairs(pairs, policy)
                if device.type == "cuda":
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - started
                peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
                row |= {
                    "episodes": len(pairs),
                    "tokens": sum(len(p.trained_ids) for p in pairs),
                    "seconds": seconds,
                    "episodes_per_second": len(pairs) / seconds,
                    "seconds_split": {k: round(v, 3) for k, v in t.seconds.items()},
                    "peak_gpu_memory_gb": peak / 2**30 if peak is not None else None,
                    "peak_bytes_per_parameter_beyond_weights": (peak - weights) / parameters if peak else None,
                    "found": summary(t),
                }
            except Exception as exc:  # one failed run must not cost the others
                row["error"] = f"{type(exc).__name__}: {exc}"
                row["traceback"] = traceback.format_exc()[-2000:]
            print(json.dumps({k: v for k, v in row.items() if k not in ("traceback", "found")}), flush=True)
            result["runs"].append(row)
            save()

    top_k = GenerationSettings(top_k=20)
    t = time.perf_counter()
    loaded, ctx, eps = played(QWEN3_TEMPLATE, n_eps)
    vocab = len(loaded.tokenizer)
    result["play_qwen3_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    policy32 = build(Qwen3Config, QWEN3_06B, torch.float32, 0)
    ref32 = build(Qwen3Config, QWEN3_06B, torch.float32, 1)
    engine = copy.deepcopy(policy32).to(torch.bfloat16)
    rows = policy32.get_input_embeddings().weight.shape[0]
    logs = {loop: engine_records(eps, loop, engine, rows) for loop in LOOPS}
    result["build_06b_seconds"] = time.perf_counter() - t
    save()
    record("0.6B float32, attribution only, batched", policy32, None, logs, ctx, vocab, gradient=False)
    record(
        "0.6B float32, attribution only, one sequence per forward",
        policy32, None, logs, ctx, vocab, gradient=False, batched=False,
    )  # fmt: skip
    record("0.6B float32, everything (top_k=20, --ref)", policy32, ref32, logs, ctx, vocab, settings=top_k)
    del policy32, ref32
    logs16 = {loop: engine_records(eps, loop, engine, rows) for loop in LOOPS}
    record("0.6B bfloat16, everything (top_k=20, no --ref)", engine, None, logs16, ctx, vocab, settings=top_k)
    del engine
    if "skip-7b" in flags or time.perf_counter() - started_all > budget / 2:
        result["7b"] = "skipped: " + (
            "--skip-7b" if "skip-7b" in flags else f"past half the time budget ({budget:g} s)"
        )
    else:
        t = time.perf_counter()
        loaded, ctx, eps = played(QWEN25_TEMPLATE, max(2, n_eps // 2))
        vocab = len(loaded.tokenizer)
        big = build(Qwen2Config, QWEN25_7B, torch.bfloat16, 0)
        rows = big.get_input_embeddings().weight.shape[0]
        logs = {loop: engine_records(eps, loop, big, rows) for loop in LOOPS}
        result["build_7b_seconds"] = time.perf_counter() - t
        save()
        record("7B (Qwen2.5-7B architecture) bfloat16, everything (top_k=20, no --ref)", big, None, logs, ctx, vocab,
               settings=top_k)  # fmt: skip
        del big
    save()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
