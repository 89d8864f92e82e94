"""`tito-audit replay 'SHARDS/*.parquet' --engine ray` against the local engine on the same shards.

    python benchmarks/bench_replay_ray.py [--episodes 4000] [--shards 8]

The shards: the log of ``bench_replay_engine.py`` (four-turn episodes of about 2,000 tokens with the engine's
prompt_ids, token columns), written as ``--shards`` Parquet files of row groups of 256 rows. One driver process
replays them, wall-timed, with: the local engine in this process (``workers=1``) and with two forked workers, and
Ray (``ray.init(num_cpus=2)``, a local instance, two actors at most), each for ``--only-tito`` (the TITO check
alone) and for the default (TITO check plus the non-canonical re-encoding of every turn; no messages, so no
render). The Ray run's totals and findings must equal the local run's (checked here, and in
``tests/replay/test_scale.py``). This machine has 2 cores: Ray cannot scale out here; the figures show what its
scheduling costs over the local engine on the same cores. Writes benchmarks/results/replay-ray.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_replay_engine import make_logs
from measure import machine, write


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=4000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--model", default="qwen2.5-7b-instruct")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import pyarrow.parquet as pq
    import ray

    from tito_audit import load
    from tito_audit.replay import ReplayContext, replay_log
    from tito_audit.replay.distributed import ContextSpec, replay_ray

    out: dict = {"machine": machine(), "command": " ".join(["python", *sys.argv]), "model": args.model}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        out["log"] = make_logs(args.model, args.episodes, folder, 1600, distinct=400)
        table = pq.read_table(folder / "engine.parquet")
        shards = folder / "shards"
        shards.mkdir()
        per = -(-table.num_rows // args.shards)
        for n in range(args.shards):
            pq.write_table(table.slice(n * per, per), shards / f"part-{n:05d}.parquet", row_group_size=256)
        out["shards"] = {"files": args.shards, "rows_per_file": per, "row_group_rows": 256}
        pattern = str(shards / "*.parquet")
        model = load(args.model)
        full = ReplayContext.from_model(model, False, drift=False)
        modes = {"only_tito": dataclasses.replace(full, noncanonical=False), "default_no_messages": full}
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            for name, ctx in modes.items():
                runs: dict = {}
                for label, call in (
                    ("local_workers_1", lambda c=ctx: replay_log(pattern, c, workers=1)),
                    ("local_workers_2", lambda c=ctx: replay_log(pattern, c, workers=2)),
                    (
                        "ray_2_cpus",
                        lambda c=ctx: replay_ray(
                            [pattern], ContextSpec(args.model, whatif=False, drift=False, noncanonical=c.noncanonical),
                            c, actors=2,
                        ),
                    ),
                ):  # fmt: skip
                    started = time.perf_counter()
                    totals = call()
                    wall = time.perf_counter() - started
                    runs[label] = {
                        "wall_seconds": round(wall, 3),
                        "episodes": totals.episodes,
                        "episodes_per_second": round(totals.episodes / wall, 1),
                        "totals": totals.to_dict(),
                        "findings": totals.findings,
                    }
                same = runs["ray_2_cpus"]["totals"] == runs["local_workers_1"]["totals"]
                same = same and runs["ray_2_cpus"]["findings"] == runs["local_workers_1"]["findings"]
                for r in runs.values():
                    r.pop("findings")
                    r["totals"] = {k: r["totals"][k] for k in ("episodes", "diverged_turns", "noncanonical_turns")}
                runs["ray_equals_local"] = same
                out[name] = runs
        finally:
            ray.shutdown()
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(write("replay-ray", out))


if __name__ == "__main__":
    main()
