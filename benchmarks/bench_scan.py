"""The corpus scan (`tito-audit scan`, every template through audit_model's token-level checks) against chatlint
0.1.2's string-level run on the same templates, as a throughput ratio, with CPU time and peak memory.

    python benchmarks/bench_scan.py [--corpus DIR] [--workers 2] [--sets full,quick] [--limit N]

Writes benchmarks/results/scan.json. ``quick`` is the scan's default scenario set, ``full`` plays every scenario
(what `tito-audit audit` plays, `--scenarios full`); the JSON also says how often the two agree (class and
verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ROOT, SHARED, machine, run, write

# relative to the checkout, where every measured command runs: results name no machine path
CORPUS = Path(os.environ.get("TITO_CORPUS", SHARED / "template-corpus"))


def scan(corpus: Path, workers: int, scenarios: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "tito_audit", "scan", str(corpus), "--workers", str(workers)]
    result = run([*cmd, "--scenarios", scenarios, "--json", str(out), "--no-progress"])
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


def chatlint(corpus: Path) -> dict:
    result = run(["chatlint", "--templates", str(corpus), "--json"])
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sets", default="quick,full", help="scenario sets to scan with, comma-separated")
    ap.add_argument("--limit", type=int, help="only the first N templates (a smoke run of this script)")
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
