"""Replay of logs that carry the engine's prompt_ids: the TITO check needs no render (issue 30, part 3).

    python benchmarks/bench_replay_engine.py [--episodes 5000] [--baseline-episodes 400] [--baseline-root ../../main]
                                             [--compare-root DIR]

The log: four-turn episodes of the audit's scenarios, each with its own long first user message (about 2,000
tokens per episode in all), played through ``Trajectory`` with a sampler that splits a token in 30% of turns, and
logged as a TITO loop that logs everything writes them: per turn the sampled ids, log-probs and the engine's
``prompt_ids``, plus ``input_ids``, ``loss_mask``, messages and tools. Written untimed, as JSONL and as Parquet (row
groups of 1,024 rows). The first ``--baseline-episodes`` are played, each distinct (no render is a cache hit of
another episode's); the rest repeat them under other ids, for the runs that render nothing.

Each run is a fresh process that loads the model and builds the context untimed, then replays the log in one
process (``--workers 1``), ``--repeats`` times, and reports the CPU seconds (``getrusage``) and wall seconds of each
``replay_log`` alone (pyarrow imported before), and the median and best episodes per CPU second: the machine is
shared, and other people's load inflates CPU time too (cache and core contention), so single runs vary by 3x:
- ``baseline``: today's replay (the code at ``--baseline-root``, main) on the first ``--baseline-episodes`` episodes
  of the JSONL log: it rebuilds the template's buffer, runs the what-if and re-encodes every turn;
- ``default``: this replay with its defaults (engine prompts as the reference, plus drift, what-if and the
  non-canonical check, which render and encode), on the same episodes;
- ``only_tito_jsonl``, ``only_tito_parquet``: ``--only-tito`` (the TITO check alone) on the whole log;
- ``cli_only_tito_parquet``: ``tito-audit replay LOG.parquet --only-tito`` end to end (process start, model load);
- with ``--compare-root DIR``, ``compare_only_tito_jsonl`` and ``compare_only_tito_parquet``: the same two runs on the
  code at DIR (the code before a change), and ``ratio_vs_compare_root``: this code's rate over it.
Target: >= 5,000 episodes per CPU second for the TITO check. Writes benchmarks/results/replay-engine.json.
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ENV, ROOT, machine, python, run, write

TIMED = r"""
import json, os, resource, sys, time
from pathlib import Path
import tito_audit
assert tito_audit.__file__.startswith(os.environ["PYTHONPATH"]), tito_audit.__file__  # the code asked for
from tito_audit import load
from tito_audit.replay import ReplayContext, replay_log
mode, log, model = sys.argv[1:4]
m = load(model)
import pyarrow.parquet  # imported before the clock starts: not a per-episode cost
if mode in ("baseline", "default"):
    ctx = ReplayContext.from_model(m)
else:
    ctx = ReplayContext.from_model(m, False, drift=False, noncanonical=False)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
reps = []
for _ in range(int(sys.argv[4])):
    c0, w0 = cpu(), time.perf_counter()
    t = replay_log(Path(log), ctx, workers=1)
    reps.append((cpu() - c0, time.perf_counter() - w0))
rates = sorted(t.episodes / c for c, _ in reps)
print(json.dumps({"episodes": t.episodes, "malformed": t.malformed, "diverged_turns": t.diverged_turns,
                  "replay_cpu_seconds": [round(c, 3) for c, _ in reps],
                  "replay_wall_seconds": [round(w, 3) for _, w in reps],
                  "episodes_per_cpu_second": round(rates[len(rates) // 2], 1),
                  "episodes_per_cpu_second_best": round(rates[-1], 1)}))
"""

FILLER_TEXT = (
    "the model reads a long task description with many details about weather cities tools and the results it "
    "expects from each call before it answers in a short sentence that names the city and the forecast for "
    "tomorrow morning afternoon evening rain sun wind snow temperature humidity pressure report summary"
)
WORDS = FILLER_TEXT.split()


def make_logs(model_name: str, episodes: int, folder: Path, filler_words: int, distinct: int = 0) -> dict:
    """The JSONL and Parquet logs; the first ``distinct`` episodes (all, when 0) are played, the rest repeat them
    under other ids (the TITO check caches nothing, so repeats cost what new episodes do)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tito_audit import load
    from tito_audit.audit.context import AuditContext, AuditOptions
    from tito_audit.testing.synthetic import Splitter, log_episode, play, with_engine_prompts

    model = load(model_name)
    ctx = AuditContext(model, AuditOptions())
    four = [s for s in ctx.scenarios if len(s.assistant_indices()) == 4]
    rng = random.Random(0)
    split = Splitter(model.tokenizer)
    jsonl = folder / "engine.jsonl"
    tokens = turns = attempts = 0
    rows: list[dict] = []
    played: list[dict] = []
    writer: list[Any] = []

    def flush() -> None:
        table = pa.Table.from_pylist(rows)
        if not writer:
            writer.append(pq.ParquetWriter(folder / "engine.parquet", table.schema))
        writer[0].write_table(table)
        rows.clear()

    with jsonl.open("w", encoding="utf-8") as fh:
        for n in range(episodes):
            if distinct and len(played) >= distinct:
                record = dict(played[n % distinct], id=f"repeat#{n}")
            else:
                while True:
                    attempts += 1
                    sc = four[attempts % len(four)]
                    msgs = sc.messages_list()
                    first_user = next(i for i, m in enumerate(msgs) if m["role"] == "user")
                    filler = " ".join(rng.choice(WORDS) for _ in range(filler_words))
                    msgs[first_user]["content"] = f"{msgs[first_user]['content']} (episode {n}) {filler}"
                    variant = dataclasses.replace(sc, messages=tuple(msgs))
                    p = play(ctx.renderer, variant, ctx.stop_ids, 0.3, rng, split)
                    if p is not None:
                        break
                record = with_engine_prompts(log_episode(p, "correct", f"{sc.id}#{n}").record, p)
                played.append(record)
            fh.write(json.dumps(record) + "\n")
            rows.append({k: record[k] for k in ("id", "turns", "input_ids", "loss_mask")})
            tokens += len(record["input_ids"])
            turns += len(record["turns"])
            if len(rows) == 1024:
                flush()
    if rows:
        flush()
    writer[0].close()
    return {
        "episodes": episodes,
        "distinct_episodes": len(played),
        "turns": turns,
        "mean_tokens_per_episode": round(tokens / episodes, 1),
        "scenarios": [s.id for s in four],
        "jsonl_bytes": jsonl.stat().st_size,
        "parquet_bytes": (folder / "engine.parquet").stat().st_size,
        "parquet_note": "token columns (id, turns with ids/logprobs/prompt_ids, input_ids, loss_mask), no messages",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=5000)
    ap.add_argument("--baseline-episodes", type=int, default=400)
    ap.add_argument("--baseline-root", default=str(ROOT.parent.parent / "main"))
    ap.add_argument("--model", default="qwen2.5-7b-instruct")
    ap.add_argument("--filler-words", type=int, default=1600)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--compare-root",
        help="another checkout (the code before a change): its --only-tito runs on the same logs, for a ratio",
    )
    args = ap.parse_args()
    out: dict = {"machine": machine(), "command": " ".join(["python", *sys.argv]), "model": args.model}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        out["log"] = make_logs(args.model, args.episodes, folder, args.filler_words, distinct=args.baseline_episodes)
        head = folder / "head.jsonl"
        with (folder / "engine.jsonl").open(encoding="utf-8") as src, head.open("w", encoding="utf-8") as dst:
            for _ in range(args.baseline_episodes):
                dst.write(src.readline())
        runs = {
            "baseline": (args.baseline_root, "baseline", head),
            "default": (str(ROOT), "default", head),
            "only_tito_jsonl": (str(ROOT), "only_tito", folder / "engine.jsonl"),
            "only_tito_parquet": (str(ROOT), "only_tito", folder / "engine.parquet"),
        }
        if args.compare_root:
            runs["compare_only_tito_jsonl"] = (args.compare_root, "only_tito", folder / "engine.jsonl")
            runs["compare_only_tito_parquet"] = (args.compare_root, "only_tito", folder / "engine.parquet")
        # without it, `python -c` puts its working directory (this checkout) first on sys.path, whatever PYTHONPATH
        # says: every run measured this checkout's code
        ENV["PYTHONSAFEPATH"] = "1"
        for name, (root, mode, log) in runs.items():
            os.environ["PYTHONPATH"] = root  # measure.ENV is read at import; set it for this run
            ENV["PYTHONPATH"] = root
            res = run(python(TIMED, mode, str(log), args.model, str(args.repeats)))
            res["code"] = root
            out[name] = res
        ENV["PYTHONPATH"] = str(ROOT)
        cli = [sys.executable, "-m", "tito_audit", "replay", str(folder / "engine.parquet"), "--model", args.model,
               "--only-tito", "--workers", "1", "--format", "json"]  # fmt: skip
        res = run(cli)
        doc = res.pop("output", None)
        if isinstance(doc, dict):
            m = doc["models"][0]
            res["verdict"], res["verdict_reasons"] = m["verdict"], m["verdict_reasons"]
            res["episodes"] = m["replay"]["episodes"]
        res["episodes_per_cpu_second"] = round(args.episodes / res["cpu_seconds"], 1)
        out["cli_only_tito_parquet"] = res
    done = [k for k in runs if isinstance(out[k].get("output"), dict)]
    rate = {k: out[k]["output"]["episodes_per_cpu_second"] for k in done}
    out["episodes_per_cpu_second"] = rate  # the median of the repeats
    out["episodes_per_cpu_second_best"] = {k: out[k]["output"]["episodes_per_cpu_second_best"] for k in done}
    if "baseline" in rate:
        ours = {k: v for k, v in rate.items() if k != "baseline" and not k.startswith("compare")}
        out["speedup_vs_baseline"] = {k: round(v / rate["baseline"], 1) for k, v in ours.items()}
    compared = [k for k in rate if f"compare_{k}" in rate]
    if compared:  # this code's rate over the other checkout's, same log, same machine, runs interleaved
        out["ratio_vs_compare_root"] = {k: round(rate[k] / rate[f"compare_{k}"], 2) for k in compared}
    out["target_episodes_per_cpu_second"] = 5000
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]  # the machine is shared: see the docs
    print(write("replay-engine", out))


if __name__ == "__main__":
    main()
