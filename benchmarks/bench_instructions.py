"""The scan's work on a corpus subset, counted in CPU instructions (valgrind's callgrind), before and after a change.

    python benchmarks/bench_instructions.py --before REF [--every 10] [--name instructions]

On this shared machine CPU seconds move by a tenth between runs of the same code, so a change worth a few per
cent cannot show in paired timings (``bench_scan_paired.py``); instruction counts move by a few thousandths.
Each side (``REF`` exported with ``git archive``, and the working tree) runs the default scan in one process
over every N-th corpus template, set up as a scan worker is (the collector frozen after the load with the
worker's threshold, the worker's memory cap, and its timer handler where that side has one), with time limits
that valgrind's slowness cannot reach. The count covers the audits only: a run with no template counts the load,
which is subtracted. Both runs end without the interpreter's teardown (``os._exit``), whose frees moved by
hundreds of millions of instructions between runs of the same code. Instructions are a proxy: cache and memory
effects are not in them, so the paired timings stay the measure of record.

Writes benchmarks/results/NAME.json. Needs valgrind; about ten minutes on two cores.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import CORPUS
from bench_scan_paired import export
from measure import ENV, ROOT, machine, write

# Run in each side's tree: ``argv[1]`` is the corpus, ``argv[2]`` the step (0: no template, the load alone).
SCAN = """
import gc, os, sys
from dataclasses import replace
sys.setrecursionlimit(10000)
import tito_audit
assert tito_audit.__file__.startswith(os.getcwd()), tito_audit.__file__  # this side's code, not the installed one
from tito_audit.rendering import RenderLimits, analysis, guard
from tito_audit.scan import AUTO, discover, load_tokenizers, plan, synthesizer_for
from tito_audit.scan.pool import PoolLimits, run_jobs
from tito_audit.sources import bundled_names
step = int(sys.argv[2])
templates = discover(sys.argv[1])[::step] if step else []
models = load_tokenizers(bundled_names(), offline=True)
jobs = plan(templates, models, AUTO)
synthesizer = synthesizer_for(templates, models)
synthesizer.prepare()
analysis.COMPILE_LIMITS = replace(analysis.COMPILE_LIMITS, seconds=3600)
gc.collect(); gc.freeze(); gc.set_threshold(5000, 10, 10)
guard.limit_process_memory(guard.address_space_bytes() + (4 << 30))
if hasattr(guard, "keep_timer_handler"):
    guard.keep_timer_handler()
run_jobs(jobs, models, PoolLimits(workers=0, render=RenderLimits(seconds=3600)), None, synthesizer)
sys.stdout.flush()
os._exit(0)
"""


def instructions(tree: Path, corpus: Path, step: int) -> int:
    """Instructions one run of ``SCAN`` executes in ``tree`` (callgrind's total)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out", sys.executable, "-c", SCAN]
        env = {**ENV, "PYTHONPATH": str(tree)}
        done = subprocess.run([*cmd, str(corpus), str(step)], cwd=tree, env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run failed in {tree} (step {step}): {done.stderr[-2000:]}")
    return int(found.group(1))


def side(tree: Path, corpus: Path, step: int) -> dict[str, Any]:
    load, total = instructions(tree, corpus, 0), instructions(tree, corpus, step)
    return {"load": load, "with_audits": total, "audits": total - load}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="git commit to compare the working tree with")
    ap.add_argument("--every", type=int, default=10, help="audit every N-th corpus template")
    ap.add_argument("--name", default="instructions")
    args = ap.parse_args()
    corpus = (ROOT / CORPUS).resolve()
    templates = len(sorted(corpus.glob("*.jinja"))[:: args.every])
    at_start = machine()
    with tempfile.TemporaryDirectory() as tmp:
        before = export(args.before, Path(tmp) / "before")
        with ThreadPoolExecutor(2) as pool:  # the two sides at once, one core each (counts do not depend on it)
            old, new = pool.map(lambda tree: side(tree, corpus, args.every), [before, ROOT])
    result = {
        "machine": at_start,
        "command": f"python benchmarks/bench_instructions.py --before {args.before} --every {args.every}",
        "before": args.before,
        "templates": templates,
        "sides": {"before": old, "after": new},
        "audits_after_over_before": round(new["audits"] / old["audits"], 4),
        "meaning": "instructions of the audits after the change over before (below 1: fewer)",
    }
    print(
        f"audits of {templates} templates: {old['audits'] / 1e9:.2f} G instructions before, "
        f"{new['audits'] / 1e9:.2f} G after ({result['audits_after_over_before']}x)"
    )
    print(write(args.name, result))


if __name__ == "__main__":
    main()
