"""Corpus scan vs chatlint 0.1.2 on the same templates, plus peak memory; one model all checks, cold and warm.

    python benchmarks/bench_scan.py [--corpus DIR] [--workers 2] [--skip-model] [--out benchmarks/results/scan.json]

Each measurement runs in its own subprocess so that peak RSS (``ru_maxrss`` of the process and its children)
belongs to that measurement alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TITO_CORPUS", "/work/shared/template-corpus"))

_SCAN = """
import json, resource, sys, time
from tito_audit.scan import PoolLimits, scan_directory
t = time.perf_counter()
s = scan_directory(sys.argv[1], "auto", limits=PoolLimits(workers=int(sys.argv[2])))
wall = time.perf_counter() - t
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": wall, "templates": len(s.results), "counts": s.counts, "flags": s.flag_counts,
                  "crashes": s.crashes, "tokenizers": s.tokenizer_counts,
                  "tokenizer_load_seconds": s.meta["tokenizer_load_seconds"],
                  "peak_rss_parent_mb": own / 1024, "peak_rss_worker_mb": kids / 1024}))
"""

_MODEL = """
import json, resource, sys, time
t0 = time.perf_counter()
from tito_audit.audit import AuditOptions, audit_model
from tito_audit.sources.load import load
m = load(sys.argv[1])
t1 = time.perf_counter()
r = audit_model(m, AuditOptions())
t2 = time.perf_counter()
r2 = audit_model(m, AuditOptions())
t3 = time.perf_counter()
print(json.dumps({"model": sys.argv[1], "verdict": r.verdict, "cold_seconds": t2 - t0, "load_seconds": t1 - t0,
                  "warm_seconds": t3 - t2, "checks": len(r.checks),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _run_py(code: str, *args: str, timeout: float = 3000) -> dict:
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=timeout, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_chatlint(corpus: Path) -> dict:
    wrapper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "p = subprocess.run(['chatlint', '--templates', sys.argv[1], '--json'], capture_output=True, text=True)\n"
        "wall = time.perf_counter() - t\n"
        "s = json.loads(p.stdout)\n"
        "print(json.dumps({'seconds': wall, 'templates': s['templates'], 'checks': s['checks'], 'rc': p.returncode,"
        " 'peak_rss_mb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))\n"
    )
    return _run_py(wrapper, str(corpus))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--model", default="qwen3-0.6b")
    ap.add_argument("--skip-model", action="store_true")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scan.json")
    args = ap.parse_args()

    from importlib.metadata import version

    results: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "command": "python benchmarks/bench_scan.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    scan = _run_py(_SCAN, str(args.corpus), str(args.workers))
    results["scan"] = scan
    print(f"scan: {scan['templates']} templates in {scan['seconds']:.1f}s, counts {scan['counts']}", flush=True)
    lint = bench_chatlint(args.corpus)
    lint["version"] = version("chatlint")
    results["chatlint"] = lint
    print(f"chatlint {lint['version']}: {lint['templates']} templates in {lint['seconds']:.1f}s", flush=True)
    results["throughput_ratio_scan_over_chatlint"] = round(
        (scan["templates"] / scan["seconds"]) / (lint["templates"] / lint["seconds"]), 3
    )
    if not args.skip_model:
        results["one_model_all_checks"] = _run_py(_MODEL, args.model)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps({k: v for k, v in results.items() if k != "machine"}, indent=2))


if __name__ == "__main__":
    main()
