"""The corpus scan before and after a change, measured in the same run: runs alternate (before, after, before,
after...), each in a fresh process (measure.py), so that both sides see the same machine load.

    python benchmarks/bench_scan_paired.py --before REF [--pairs 2] [--workers 2] [--name scan-paired]

``REF`` is a git commit of this repository; its tree is exported (``git archive``) to a temporary folder and
scanned from there, the working tree is the "after" side. Both scan with the default options (quick
scenarios, --tokenizer auto). Writes benchmarks/results/NAME.json: per run wall and CPU seconds and the class
counts, and per side the medians, templates per second, and seconds per template that got a verdict.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import CORPUS
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="git commit to compare against (the working tree is after)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--name", default="scan-paired")
    ap.add_argument("--markdown-after", type=Path, help="copy the last after-run's Markdown summary here")
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
            for name, tree in trees.items():
                run = scan_once(tree, args.corpus, args.workers, Path(tmp) / f"{name}-{i}.json")
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
    ratios = [
        r_after["wall_seconds"] / r_before["wall_seconds"]
        for r_before, r_after in zip(results["runs"][::2], results["runs"][1::2], strict=True)
    ]
    results["ratios"] = {
        "wall_after_over_before_per_pair": [round(x, 3) for x in ratios],
        "median_wall_after_over_before": round(a["median_wall_seconds"] / b["median_wall_seconds"], 3),
        "median_cpu_after_over_before": round(a["median_cpu_seconds"] / b["median_cpu_seconds"], 3),
        "wall_per_verdict_after_over_before": round(a["wall_seconds_per_verdict"] / b["wall_seconds_per_verdict"], 3),
        "cpu_per_verdict_after_over_before": round(a["cpu_seconds_per_verdict"] / b["cpu_seconds_per_verdict"], 3),
    }
    print(json.dumps(results["ratios"]))
    print(write(args.name, results))


if __name__ == "__main__":
    main()
