"""Every hostile template ends in ``audit`` within 60 s, on an idle machine and under load:

    python benchmarks/bench_hostile_audit.py [--only cpuloop,slow_render] [--load N]

Each template of ``tests/data/hostile`` is audited in a fresh process (``tito-audit audit qwen3-0.6b
--chat-template T --format json``), first with the machine as it is, then with ``--load`` busy processes beside it
(default: one per core). Writes benchmarks/results/hostile-audit.json: per template and round the wall and CPU
seconds, the exit code and the error kind, and the slowest wall time of each round against the 60 s bound.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ROOT, machine, timed, write

HOSTILE = ROOT / "tests" / "data" / "hostile"
BOUND_S = 60.0


def audit(template: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tito_audit", "audit", "qwen3-0.6b", "--chat-template", str(template)]
    out = timed([*cmd, "--format", "json", "--jobs", "1"], timeout=900)
    model = (out.get("output") or {}).get("models", [{}])[0]
    return {
        "wall_seconds": out["wall_seconds"],
        "cpu_seconds": out["cpu_seconds"],
        "max_rss_mb": out.get("max_rss_one_process_mb"),
        "rc": out["rc"],
        "ended_as": model.get("error_kind") or model.get("verdict"),
    }


def round_of(templates: list[Path]) -> dict[str, Any]:
    runs = {t.stem: audit(t) for t in templates}
    slowest = max(runs, key=lambda n: runs[n]["wall_seconds"])
    return {
        "runs": runs,
        "slowest": slowest,
        "slowest_wall_seconds": runs[slowest]["wall_seconds"],
        "all_within_bound": all(r["wall_seconds"] < BOUND_S for r in runs.values()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated template names (default: every one)")
    parser.add_argument("--load", type=int, default=os.cpu_count() or 1, help="busy processes in the loaded round")
    args = parser.parse_args()
    names = {n for n in args.only.split(",") if n}
    templates = [t for t in sorted(HOSTILE.glob("*.jinja")) if not names or t.stem in names]
    result: dict[str, Any] = {"machine": machine(), "bound_seconds": BOUND_S, "idle": round_of(templates)}
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    try:
        result["loaded"] = {"busy_processes": args.load, **round_of(templates)}
    finally:
        for b in burners:
            b.kill()
            b.wait()
    path = write("hostile-audit", result)
    for label in ("idle", "loaded"):
        r = result[label]
        print(f"{label}: slowest {r['slowest']} {r['slowest_wall_seconds']:.1f}s; all within {BOUND_S:g}s: "
              f"{r['all_within_bound']}")  # fmt: skip
    print(f"wrote {path}")
    return 0 if result["idle"]["all_within_bound"] and result["loaded"]["all_within_bound"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
