"""The corpus scan before and after a change, measured in the same run: runs alternate (before, after, before,
after...), each in a fresh process (measure.py), so that both sides see the same machine load.

    python benchmarks/bench_scan_paired.py --before REF [--pairs 2] [--workers 2] [--name scan-paired] [--chatlint]

``--chatlint``: each pair runs chatlint 0.1.2's string-level check of the corpus first (chatlint, before, after),
and the results add each side's throughput over chatlint's, per pair and of the medians, in wall time and per CPU
second (CPU: user + sys of the process tree; above 1, the scan gets through the corpus faster), with the load
average before every run.

``REF`` is a git commit of this repository; its tree is exported (``git archive``) to a temporary folder and
scanned from there, the working tree is the "after" side. Both scan with the default options (quick
scenarios, --tokenizer auto). Writes benchmarks/results/NAME.json: per run wall and CPU seconds and the class
counts, and per side the medians, templates per second, and seconds per template that got a verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import CORPUS, chatlint, once, ratio
from measure import ROOT, SHARED, _run_once, machine, write

VERDICTS = ("unsafe", "tito-required", "safe")


def export(ref: str, into: Path) -> Path:
    """The tree of commit ``ref`` in ``into`` (git archive: tracked files only, as committed)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", ref], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def scan_once(tree: Path, corpus: Path, workers: int, out: Path) -> dict[str, Any]:
    """One scan with the code of ``tree`` (run from there, so that its ``tito_audit`` is the one imported); its
    Markdown summary goes beside ``out``."""
    cmd = (
        f"cd {tree} && exec {sys.executable} -m tito_audit scan {corpus} --workers {workers} --json {out} "
        f"--markdown {out.with_suffix('.md')} --no-progress"
    )
    result = _run_once(["sh", "-c", cmd], 3600, sample=False)
    summary = json.loads(out.read_text())
    verdicts = sum(n for c, n in summary["counts"].items() if c in VERDICTS)
    result.update(
        {
            "templates": summary["templates"],
            "counts": summary["counts"],
            "approximate": summary.get("approximate", {}),
            "verdicts": verdicts,
            "crashes": summary["crashes"],
            "tokenizer_load_seconds": summary["tokenizer_load_seconds"],
        }
    )
    return result


def side(runs: list[dict[str, Any]]) -> dict[str, Any]:
    wall = statistics.median(r["wall_seconds"] for r in runs)
    cpu = statistics.median(r["cpu_seconds"] for r in runs)
    templates, verdicts = runs[0]["templates"], runs[0]["verdicts"]
    return {
        "median_wall_seconds": round(wall, 2),
        "median_cpu_seconds": round(cpu, 2),
        "templates_per_wall_second": round(templates / wall, 2),
        "wall_seconds_per_verdict": round(wall / verdicts, 4) if verdicts else None,
        "cpu_seconds_per_verdict": round(cpu / verdicts, 4) if verdicts else None,
        "verdicts": verdicts,
        "counts": runs[0]["counts"],
        "approximate": runs[0]["approximate"],
    }


def over_chatlint(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each side's throughput over chatlint's in the same pair, and of the medians (above 1: faster)."""
    lints = [r for r in runs if r["side"] == "chatlint"]
    out: dict[str, Any] = {"meaning": "templates per second of the scan over chatlint's (above 1: the scan is faster)"}
    lint_median = {
        "templates": lints[0]["templates"],
        "wall_seconds": statistics.median(r["wall_seconds"] for r in lints),
        "cpu_seconds": statistics.median(r["cpu_seconds"] for r in lints),
    }
    for name in ("before", "after"):
        scans = [r for r in runs if r["side"] == name]
        median = {
            "templates": scans[0]["templates"],
            "wall_seconds": statistics.median(r["wall_seconds"] for r in scans),
            "cpu_seconds": statistics.median(r["cpu_seconds"] for r in scans),
        }
        out[name] = {
            "wall_per_pair": [ratio(s, c, "wall_seconds") for c, s in zip(lints, scans, strict=True)],
            "cpu_per_pair": [ratio(s, c, "cpu_seconds") for c, s in zip(lints, scans, strict=True)],
            "median_wall": ratio(median, lint_median, "wall_seconds"),
            "median_cpu": ratio(median, lint_median, "cpu_seconds"),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="git commit to compare against (the working tree is after)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--name", default="scan-paired")
    ap.add_argument("--markdown-after", type=Path, help="copy the last after-run's Markdown summary here")
    ap.add_argument("--chatlint", action="store_true", help="run chatlint first in each pair (see the docstring)")
    args = ap.parse_args()
    results: dict[str, Any] = {
        "machine": machine(),
        "command": "python benchmarks/bench_scan_paired.py " + " ".join(sys.argv[1:]),
        "before": subprocess.run(
            ["git", "rev-parse", args.before], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "after": "working tree at "
        + subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip(),
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        before = export(args.before, Path(tmp) / "before")
        # a corpus named relative to the checkout (../shared/...) is found from the exported tree too
        (Path(tmp) / SHARED.name).symlink_to((ROOT / SHARED).resolve())
        trees = {"before": before, "after": ROOT}
        for i in range(args.pairs):
            if args.chatlint:
                lint = chatlint(args.corpus, once)
                lint.pop("output", None)
                results["runs"].append({"side": "chatlint", "pair": i, **lint})
                print(f"chatlint {i}: {lint['wall_seconds']}s wall, {lint['cpu_seconds']}s CPU", flush=True)
            for name, tree in trees.items():
                load = [round(x, 2) for x in os.getloadavg()]
                run = scan_once(tree, args.corpus, args.workers, Path(tmp) / f"{name}-{i}.json")
                run["load_average_before"] = load
                run["side"], run["pair"] = name, i
                results["runs"].append(run)
                if name == "after" and args.markdown_after:
                    text = (Path(tmp) / f"{name}-{i}.md").read_text().replace(str(args.corpus), "template-corpus")
                    args.markdown_after.write_text(text)
                print(
                    f"{name} {i}: {run['wall_seconds']}s wall, {run['cpu_seconds']}s CPU, {run['counts']}", flush=True
                )
    for name in ("before", "after"):
        results[name + "_summary"] = side([r for r in results["runs"] if r["side"] == name])
    b, a = results["before_summary"], results["after_summary"]
    befores = [r for r in results["runs"] if r["side"] == "before"]
    afters = [r for r in results["runs"] if r["side"] == "after"]
    ratios = [after["wall_seconds"] / before["wall_seconds"] for before, after in zip(befores, afters, strict=True)]
    results["ratios"] = {
        "wall_after_over_before_per_pair": [round(x, 3) for x in ratios],
        "median_wall_after_over_before": round(a["median_wall_seconds"] / b["median_wall_seconds"], 3),
        "median_cpu_after_over_before": round(a["median_cpu_seconds"] / b["median_cpu_seconds"], 3),
        "wall_per_verdict_after_over_before": round(a["wall_seconds_per_verdict"] / b["wall_seconds_per_verdict"], 3),
        "cpu_per_verdict_after_over_before": round(a["cpu_seconds_per_verdict"] / b["cpu_seconds_per_verdict"], 3),
    }
    if args.chatlint:
        results["ratios"]["over_chatlint"] = over_chatlint(results["runs"])
    print(json.dumps(results["ratios"]))
    print(write(args.name, results))


if __name__ == "__main__":
    main()
