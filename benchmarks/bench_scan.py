"""The corpus scan (`tito-audit scan`, every template through audit_model's token-level checks) against chatlint
0.1.2's string-level run on the same templates, as a throughput ratio, with CPU time and peak memory.

    python benchmarks/bench_scan.py [--corpus DIR] [--workers 2] [--sets full,quick] [--limit N]
    python benchmarks/bench_scan.py --pairs N [--name scan-chatlint-paired]

Writes benchmarks/results/scan.json. ``quick`` is the scan's default scenario set, ``full`` plays every scenario
(what `tito-audit audit` plays, `--scenarios full`); the JSON also says how often the two agree (class and
verdict).

``--pairs N`` is the paired comparison instead: chatlint and the default scan (quick scenarios) run alternately,
N times each, each in a fresh process and timed without memory sampling, so that both see the same load; it
writes benchmarks/results/NAME.json with every run, the load average before each, the per-pair ratios and the
ratios of the medians (above 1: the scan gets through the corpus faster, in wall time or per CPU second).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ROOT, SHARED, _run_once, machine, run, write

# relative to the checkout, where every measured command runs: results name no machine path
CORPUS = Path(os.environ.get("TITO_CORPUS", SHARED / "template-corpus"))


def scan(corpus: Path, workers: int, scenarios: str, out: Path, measure: Any = run) -> dict:
    cmd = [sys.executable, "-m", "tito_audit", "scan", str(corpus), "--workers", str(workers)]
    result = measure([*cmd, "--scenarios", scenarios, "--json", str(out), "--no-progress"])
    summary = json.loads(out.read_text())
    result.update(
        {
            "scenarios": scenarios,
            "workers": workers,
            "templates": summary["templates"],
            "crashes": summary["crashes"],
            "counts": summary["counts"],
            "flags": summary["flags"],
            "tokenizer_load_seconds": summary["tokenizer_load_seconds"],
            "seconds_in_scan": summary["seconds"],
        }
    )
    return result


def chatlint(corpus: Path, measure: Any = run) -> dict:
    result = measure(["chatlint", "--templates", str(corpus), "--json"])
    out = result.pop("output", {})
    result.update({"version": version("chatlint"), "templates": out.get("templates"), "checks": out.get("checks")})
    return result


def ratio(ours: dict, theirs: dict, key: str) -> float:
    """Templates per second of ours over theirs (above 1: the scan gets through the corpus faster)."""
    return round((ours["templates"] / ours[key]) / (theirs["templates"] / theirs[key]), 3)


def agreement(a: Path, b: Path) -> dict:
    full = {r["name"]: (r["cls"], r["verdict"]) for r in json.loads(a.read_text())["results"]}
    quick = {r["name"]: (r["cls"], r["verdict"]) for r in json.loads(b.read_text())["results"]}
    differ = Counter(f"{full[n][0]} -> {quick[n][0] if n in quick else None}" for n in full if quick.get(n) != full[n])
    return {"same_class": sum(1 for n in full if quick.get(n) == full[n]), "of": len(full), "differ": dict(differ)}


def once(cmd: list[str]) -> dict:
    """One timed run (no memory sampling), with the load average just before it."""
    load = [round(x, 2) for x in os.getloadavg()]
    return {**_run_once(cmd, 3600, sample=False), "load_average_before": load}


def paired(corpus: Path, workers: int, pairs: int, tmp: Path) -> dict:
    """chatlint and the default scan, alternately (see the module docstring)."""
    runs: list[dict] = []
    for i in range(pairs):
        lint = chatlint(corpus, once)
        ours = scan(corpus, workers, "quick", tmp / f"quick-{i}.json", once)
        for side, res in (("chatlint", lint), ("scan_quick", ours)):
            res.pop("output", None)
            runs.append({"side": side, "pair": i, **res})
        print(
            f"pair {i}: chatlint {lint['wall_seconds']}s wall {lint['cpu_seconds']}s CPU; scan {ours['wall_seconds']}s "
            f"wall {ours['cpu_seconds']}s CPU, counts {ours['counts']}",
            flush=True,
        )
    lints = [r for r in runs if r["side"] == "chatlint"]
    scans = [r for r in runs if r["side"] == "scan_quick"]

    def median(rows: list[dict], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    medians = {
        side: {"wall_seconds": median(rows, "wall_seconds"), "cpu_seconds": median(rows, "cpu_seconds")}
        for side, rows in (("chatlint", lints), ("scan_quick", scans))
    }
    templates = {"chatlint": lints[0]["templates"], "scan_quick": scans[0]["templates"]}
    for side in medians:
        medians[side]["templates"] = templates[side]
    return {
        "runs": runs,
        "medians": medians,
        "ratios": {
            "wall_per_pair": [ratio(s, c, "wall_seconds") for c, s in zip(lints, scans, strict=True)],
            "cpu_per_pair": [ratio(s, c, "cpu_seconds") for c, s in zip(lints, scans, strict=True)],
            "median_wall": ratio(medians["scan_quick"], medians["chatlint"], "wall_seconds"),
            "median_cpu": ratio(medians["scan_quick"], medians["chatlint"], "cpu_seconds"),
            "meaning": "templates per second of the scan over chatlint's (above 1: the scan is faster)",
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sets", default="quick,full", help="scenario sets to scan with, comma-separated")
    ap.add_argument("--limit", type=int, help="only the first N templates (a smoke run of this script)")
    ap.add_argument("--pairs", type=int, help="paired runs: chatlint and the default scan, alternately, N times")
    ap.add_argument("--name", default="scan-chatlint-paired", help="results file of --pairs")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.corpus
        if args.limit:
            corpus = Path(tmp) / "corpus"
            corpus.mkdir()
            for p in sorted((ROOT / args.corpus).glob("*.jinja"))[: args.limit]:
                shutil.copy(p, corpus / p.name)
        results: dict = {
            "machine": machine(),
            "command": "python benchmarks/bench_scan.py " + " ".join(sys.argv[1:]),
            "corpus": str(args.corpus) + (f" (first {args.limit})" if args.limit else ""),
        }
        if args.pairs:
            results.update(paired(corpus, args.workers, args.pairs, Path(tmp)))
            print(json.dumps(results["ratios"]))
            print(write(args.name, results))
            return
        lint = chatlint(corpus)
        results["chatlint"] = lint
        print(f"chatlint {lint['version']}: {lint['templates']} templates in {lint['wall_seconds']}s", flush=True)
        outs = {}
        for name in [s for s in args.sets.split(",") if s]:
            outs[name] = Path(tmp) / f"{name}.json"
            res = scan(corpus, args.workers, name, outs[name])
            res["throughput_ratio_vs_chatlint"] = ratio(res, lint, "wall_seconds")
            res["cpu_throughput_ratio_vs_chatlint"] = ratio(res, lint, "cpu_seconds")
            results[f"scan_{name}"] = res
            print(
                f"scan {name}: {res['templates']} templates in {res['wall_seconds']}s "
                f"(ratio {res['throughput_ratio_vs_chatlint']}), counts {res['counts']}",
                flush=True,
            )
        if {"full", "quick"} <= outs.keys():
            results["quick_vs_full"] = agreement(outs["full"], outs["quick"])
    print(write("scan", results))


if __name__ == "__main__":
    main()
