"""`tito-audit replay` throughput on 10,000 four-turn episodes (with the naive "what if"), and the run-time guard.

    python benchmarks/bench_replay.py [--episodes 10000] [--workers 2] [--model qwen2.5-7b-instruct]

The log is written first (untimed): the audit's four-turn scenarios played through ``Trajectory`` with a sampler
that splits a token in 30% of turns, each episode with its own first user message, so no render is a cache hit
of another episode's. Then, timed in fresh processes: ``tito-audit replay LOG --workers N --format json`` (targets:
<= 60 s), and ``check_batch`` alone over the same episodes in batches of 64 (target: >= 100,000 episodes/min),
on a correct and on a naive-re-tokenizing loop. Writes benchmarks/results/replay.json, with the load average:
the machine is shared, so figures are noisy.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import machine, python, run, write

GUARD = r"""
import json, sys, time
from tito_audit import check_batch
rows = [json.loads(l) for l in open(sys.argv[1])]
batches = [[{"sampled": [t["ids"] for t in r["turns"]], "input_ids": r["input_ids"], "loss_mask": r["loss_mask"]}
            for r in rows[i:i + 64]] for i in range(0, len(rows), 64)]
t = time.perf_counter()
failed = sum(len(check_batch(b, on_fail="return").failures) for b in batches)
s = time.perf_counter() - t
print(json.dumps({"episodes": len(rows), "failed": failed, "seconds": round(s, 4),
                  "episodes_per_minute": round(60 * len(rows) / s),
                  "ms_per_1000_episodes": round(1000 * s / len(rows) * 1000, 2)}))
"""


def make_log(model_name: str, episodes: int, loop: str, path: Path, seed: int = 0) -> dict:
    from tito_audit import load
    from tito_audit.audit.context import AuditContext, AuditOptions
    from tito_audit.testing.synthetic import Splitter, log_episode, play

    model = load(model_name)
    ctx = AuditContext(model, AuditOptions())
    four = [s for s in ctx.scenarios if len(s.assistant_indices()) == 4]
    rng = random.Random(seed)
    split = Splitter(model.tokenizer)
    turns = diverged = 0
    with path.open("w", encoding="utf-8") as fh:
        n = 0
        while n < episodes:
            sc = four[n % len(four)]
            msgs = sc.messages_list()
            first_user = next(i for i, m in enumerate(msgs) if m["role"] == "user")
            msgs[first_user]["content"] = f"{msgs[first_user]['content']} (episode {n})"
            variant = dataclasses.replace(sc, messages=tuple(msgs))
            p = play(ctx.renderer, variant, ctx.stop_ids, 0.3, rng, split)
            if p is None:
                n += 1
                continue
            logged = log_episode(p, loop, f"{sc.id}#{n}")
            fh.write(json.dumps(logged.record) + "\n")
            turns += len(p.turns)
            diverged += len(logged.truth)
            n += 1
    return {"episodes": episodes, "turns": turns, "injected_divergences": diverged, "scenarios": [s.id for s in four]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", default="qwen2.5-7b-instruct")
    args = ap.parse_args()
    out: dict = {"machine": machine(), "command": " ".join(["python", *sys.argv]), "model": args.model}
    with tempfile.TemporaryDirectory() as tmp:
        logs = {}
        for loop in ("correct", "naive_retokenize"):
            logs[loop] = Path(tmp) / f"{loop}.jsonl"
            out[f"log_{loop}"] = make_log(args.model, args.episodes, loop, logs[loop])
            out[f"log_{loop}"]["bytes"] = logs[loop].stat().st_size
        for loop, path in logs.items():
            cmd = [sys.executable, "-m", "tito_audit", "replay", str(path), "--model", args.model,
                   "--workers", str(args.workers), "--format", "json"]  # fmt: skip
            res = run(cmd)
            doc = res.pop("output", None)
            if isinstance(doc, dict):
                res["replay"] = doc["models"][0]["replay"]
                res["verdict"] = doc["models"][0]["verdict"]
            res["episodes_per_second"] = round(args.episodes / res["wall_seconds"], 1)
            res["target_seconds"] = 60
            out[f"replay_{loop}"] = res
            guard = run(python(GUARD, str(path)))
            guard["target_episodes_per_minute"] = 100_000
            out[f"guard_{loop}"] = guard
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]  # the machine is shared: see the docs
    print(write("replay", out))


if __name__ == "__main__":
    main()
