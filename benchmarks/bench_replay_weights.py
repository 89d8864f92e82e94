"""`tito-audit replay --weights` on CPU: episodes per second for a small model, batched against one at a time.

The log: the audit's scenarios played on the bundled ``qwen3-0.6b`` template (``templates_cache/``, no
``../shared``) with a sampler that splits a token in 30 % of the turns, logged with every turn's ``prompt_ids``;
the engine's log-probs are the policy's own in bfloat16 (a bf16 engine beside a float32 trainer: numeric drift).
Two loops: ``correct`` and ``naive_retokenize``. The policy: Qwen3's architecture, randomly initialised from a
transformers config at a small width, with the full 151,936-row vocabulary (its head is most of the cost), float32;
the reference (``--ref``) another seed of the same.

Timed in one process, the model loaded first (as ``replay --weights`` loads it once), ``analyze_pairs`` alone, each
configuration ``--repeats`` times (median and best):
- ``attribution, padded batches``: the log-prob attribution, no sampler, no gradient, in padded batches;
- ``attribution, one at a time``: the same with one sequence per forward (the CPU default; ``batching_speedup_*``
  is the ratio of the two);
- ``+ estimators``: plus the KL estimators' bias under ``top_k=20`` against the reference;
- ``+ gradient``: plus the per-episode gradient comparison (what ``replay --weights`` does by default).

Run: python benchmarks/bench_replay_weights.py [--episodes=24] [--hidden=64] [--layers=4] [--repeats=3]
Writes benchmarks/results/replay-weights.json.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEMPLATE = "qwen3-0.6b"
LOOPS = ("correct", "naive_retokenize")


def played(template: str, episodes: int, seed: int = 3) -> tuple[Any, Any, list[Any]]:
    """(loaded model, replay context, played episodes) from a bundled template."""
    from tito_audit import load
    from tito_audit.replay import ReplayContext
    from tito_audit.testing.synthetic import played_episodes

    model = load(template)
    return model, ReplayContext.from_model(model), played_episodes(model, 0.3, seed=seed)[:episodes]


def engine_records(eps: list[Any], loop: str, engine: Any, vocab: int) -> list[dict[str, Any]]:
    """Native records of ``loop`` with each turn's prompt_ids and the log-probs ``engine`` gives its samples."""
    from tito_audit.policy.model import VocabMap
    from tito_audit.replay.weights.logprobs import Row, row_logps
    from tito_audit.testing.synthetic import log_episode, with_engine_prompts

    rows = [Row(p.traj.input_ids, [j for a, b in p.traj.sampled_spans() for j in range(a, b)]) for p in eps]
    lps = row_logps(engine, VocabMap.full(vocab), rows)
    out = []
    for n, (p, lp) in enumerate(zip(eps, lps, strict=True)):
        rec = with_engine_prompts(log_episode(p, loop, f"ep{n}").record, p)
        it = iter(lp.tolist())
        for turn, (a, b) in zip(rec["turns"], p.traj.sampled_spans(), strict=True):
            turn["logprobs"] = [next(it) for _ in range(a, b)]
        out.append(rec)
    return out


def pairs_of(recs: list[dict[str, Any]], ctx: Any, settings: Any = None) -> list[Any]:
    from tito_audit.replay.schema import episode_from_native
    from tito_audit.replay.weights import build_pair, tito_only, with_settings

    check = tito_only(ctx)
    return [with_settings(build_pair(episode_from_native(r, n + 1), check), settings, None) for n, r in enumerate(recs)]


def summary(t: Any) -> dict[str, Any]:
    """The figures a run found (the same in every repeat)."""
    a = t.attribution.to_dict()
    return {
        "numeric": {k: a["classes"]["numeric"][k] for k in ("units", "mean_abs_dlogp", "share")},
        "tito": {k: a["classes"]["tito"][k] for k in ("units", "mean_abs_dlogp", "share")},
        "never_sampled": {k: a["classes"]["never_sampled"][k] for k in ("trained_tokens", "units", "share")},
        "gradient": {k: t.gradient.to_dict()[k] for k in ("compared", "identical", "differ", "cosine_min")},
        "estimators": {k: t.bias.to_dict().get(k) for k in ("positions", "recommended", "truncated_mass")},
        "batched": t.batched,
    }


def main() -> None:
    flags = dict(a[2:].split("=", 1) if "=" in a else (a[2:], "1") for a in sys.argv[1:] if a.startswith("--"))
    n_eps, hidden, layers = int(flags.get("episodes", 24)), int(flags.get("hidden", 64)), int(flags.get("layers", 4))
    repeats = int(flags.get("repeats", 3))
    out = Path(flags.get("out", Path(__file__).parent / "results" / "replay-weights.json"))
    from transformers import AutoModelForCausalLM, Qwen3Config

    from tito_audit.policy.generation import GenerationSettings
    from tito_audit.policy.model import VocabMap, cap_threads
    from tito_audit.replay.weights import Policy, analyze_pairs

    config = dict(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen3Config(**config), dtype=torch.float32).eval()
    torch.manual_seed(1)
    ref = AutoModelForCausalLM.from_config(Qwen3Config(**config), dtype=torch.float32).eval()
    parameters = sum(p.numel() for p in model.parameters())
    threads = cap_threads(torch.device("cpu"), parameters)
    loaded, ctx, eps = played(TEMPLATE, n_eps)
    vocab = len(loaded.tokenizer)
    engine = copy.deepcopy(model).to(torch.bfloat16)
    logs = {loop: engine_records(eps, loop, engine, 151936) for loop in LOOPS}
    tokens = sum(len(p.traj.input_ids) for p in eps)
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_replay_weights.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores (shared), torch threads "
        f"{threads}, load average {os.getloadavg()[0]:.1f} at the start",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "model": f"Qwen3 architecture, {layers} layers x {hidden}, vocabulary 151,936 (tied), float32, random",
        "parameters": parameters,
        "log": f"{len(eps)} episodes of the bundled {TEMPLATE} template, {tokens} tokens, prompt_ids and bf16 "
        "engine log-probs",
        "runs": [],
    }
    top_k = GenerationSettings(top_k=20)
    configs = (
        ("attribution, padded batches", dict(gradient=False, batched=True), None, False, None),
        ("attribution, one at a time (the CPU default)", dict(gradient=False, batched=False), None, False, None),
        ("+ estimators (top_k=20, --ref)", dict(gradient=False), top_k, True, None),
        ("+ gradient (the default)", dict(gradient=True), top_k, True, None),
    )
    for loop in LOOPS:
        for label, kw, settings, with_ref, _ in configs:
            times, found = [], None
            for _ in range(repeats):
                pairs = pairs_of(logs[loop], ctx, settings)
                policy = Policy.of(model, VocabMap.full(151936, valid=vocab), ref if with_ref else None,
                                   stop_ids=ctx.stop_ids, **kw)  # fmt: skip
                started = time.perf_counter()
                t = analyze_pairs(pairs, policy)
                times.append(time.perf_counter() - started)
                found = summary(t) | {"seconds_split": {k: round(v, 3) for k, v in t.seconds.items()}}
            row = {
                "loop": loop,
                "run": label,
                "episodes": len(eps),
                "seconds_median": statistics.median(times),
                "seconds_best": min(times),
                "episodes_per_second_median": len(eps) / statistics.median(times),
                "episodes_per_second_best": len(eps) / min(times),
                "found": found,
            }
            print(json.dumps({k: row[k] for k in ("loop", "run", "episodes_per_second_median")}), flush=True)
            result["runs"].append(row)
    for loop in LOOPS:
        by = {r["run"]: r for r in result["runs"] if r["loop"] == loop}
        result[f"batching_speedup_{loop}"] = (
            by["attribution, one at a time (the CPU default)"]["seconds_median"]
            / by["attribution, padded batches"]["seconds_median"]
        )
    result["load_average_end"] = round(os.getloadavg()[0], 1)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
