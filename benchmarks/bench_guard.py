"""The run-time guard's cost after it learnt to read prompt_ids, labels and response_mask, against another checkout.

    python benchmarks/bench_guard.py [--episodes 3000] [--baseline /path/to/other/checkout]
    # -> benchmarks/results/guard.json

The same logs as bench_replay.py (four-turn episodes of bundled ``qwen2.5-7b-instruct``, a correct loop and a
naive re-tokenizing one), ``check_batch`` over them in batches of 64 (bench_replay's GUARD script, in a fresh
process), this checkout and the baseline alternating, five runs each; reported: the median per 1,000 episodes
and the ratio this/baseline. A third log gives each turn its ``prompt_ids`` (the buffer before the turn), so
that the context comparison runs too (this checkout only: the baseline ignores them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay import GUARD, make_log
from measure import ROOT, machine, timed, write

RUNS = 5


def with_prompt_ids(src: Path, dst: Path) -> None:
    """Each turn's prompt_ids: the trained ids before the turn's run of mask 1 (a TITO engine's context)."""
    with src.open(encoding="utf-8") as fh, dst.open("w", encoding="utf-8") as out:
        for line in fh:
            r = json.loads(line)
            starts = [i for i, m in enumerate(r["loss_mask"]) if m and (i == 0 or not r["loss_mask"][i - 1])]
            for t, a in zip(r["turns"], starts, strict=True):
                t["prompt_ids"] = r["input_ids"][:a]
            out.write(json.dumps(r) + "\n")


GUARD_CONTEXT = GUARD.replace('[t["ids"] for t in r["turns"]]', 'r["turns"]')


def run(checkout: Path, script: str, log: Path) -> dict:
    result = timed([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(checkout)!r})\n{script}", str(log)])
    return result["output"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=3000)
    ap.add_argument("--baseline", type=Path, help="another checkout (e.g. main) to compare with")
    args = ap.parse_args()
    at_start = machine()
    out: dict = {"machine": at_start, "episodes": args.episodes, "runs": RUNS, "logs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        logs = {}
        for loop in ("correct", "naive_retokenize"):
            logs[loop] = Path(tmp) / f"{loop}.jsonl"
            make_log("qwen2.5-7b-instruct", args.episodes, loop, logs[loop])
        with_prompt_ids(logs["correct"], Path(tmp) / "context.jsonl")
        for loop, log in logs.items():
            mine, base = [], []
            for _ in range(RUNS):
                mine.append(run(ROOT, GUARD, log))
                if args.baseline:
                    base.append(run(args.baseline, GUARD, log))
            entry = {"ms_per_1000_episodes": statistics.median(r["ms_per_1000_episodes"] for r in mine)}
            entry["failed"] = mine[0]["failed"]
            if base:
                entry["baseline_ms_per_1000_episodes"] = statistics.median(r["ms_per_1000_episodes"] for r in base)
                entry["baseline_failed"] = base[0]["failed"]
                entry["ratio"] = round(entry["ms_per_1000_episodes"] / entry["baseline_ms_per_1000_episodes"], 3)
            out["logs"][loop] = entry
        context = [run(ROOT, GUARD_CONTEXT, Path(tmp) / "context.jsonl") for _ in range(RUNS)]
        out["logs"]["correct_with_prompt_ids"] = {
            "ms_per_1000_episodes": statistics.median(r["ms_per_1000_episodes"] for r in context),
            "failed": context[0]["failed"],
        }
    if args.baseline:
        out["baseline"] = str(args.baseline)
    print(write("guard", out))


if __name__ == "__main__":
    main()
