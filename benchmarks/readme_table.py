"""Rewrite the benchmark table in docs/performance.md (between the ``benchmarks:start``/``end`` markers) from
benchmarks/results/audit.json and scan.json: ``python benchmarks/readme_table.py [--print]``."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def _row(what: str, r: dict, extra: str = "") -> str:
    mem = f"{r['peak_pss_tree_mb']:.0f} ({r['peak_rss_tree_mb']:.0f})"
    return f"| {what} | {r['wall_seconds']:.1f} | {r['cpu_seconds']:.1f} | {mem} | {extra} |"


def table() -> str:
    audit = json.loads((RESULTS / "audit.json").read_text())
    scan = json.loads((RESULTS / "scan.json").read_text())
    one = audit["one_model"]
    lines = [
        "| benchmark | wall s | CPU s | peak memory MiB, PSS (RSS), all processes | notes |",
        "|---|---:|---:|---:|---|",
        _row(
            f"one model, all checks, cold: `tito-audit audit {one['model']} -q`",
            one["cli_cold"],
            f"in process: imports {one['import_seconds']:.1f} s, tokenizer load {one['load_seconds']:.1f} s, "
            f"first audit {one['first_audit_seconds']:.2f} s",
        ),
        f"| one model, all checks, warm (model loaded, audited again) | {one['repeat_audit_seconds_median']:.2f} "
        f"| | | median of repeats; {one['checks']} checks, {one['scenarios_played']} scenarios |",
    ]
    for key in ("shared_set_sequential", "shared_set_parallel"):
        r = audit[key]
        lines.append(_row(f"shared set ({r['models']} repos), all checks, `--jobs {r['jobs']}`", r))
    lint = scan["chatlint"]
    lines.append(_row(f"chatlint {lint['version']} (string level), {lint['templates']} templates", lint))
    for name, label in (("quick", "`tito-audit scan` (default `--scenarios quick`)"), ("full", "`--scenarios full`")):
        r = scan.get(f"scan_{name}")
        if r:
            lines.append(
                _row(
                    f"{label} corpus, {r['workers']} workers, {r['templates']} templates",
                    r,
                    f"throughput **{r['throughput_ratio_vs_chatlint']}x** chatlint's (CPU: "
                    f"{r['cpu_throughput_ratio_vs_chatlint']}x); {r['crashes']} crashes; tokenizers loaded in "
                    f"{r['tokenizer_load_seconds']:.1f} s",
                )
            )
    agree = scan.get("quick_vs_full")
    note = (
        f"\n\nQuick and full scans give the same class and verdict to {agree['same_class']} of {agree['of']} templates."
        if agree
        else ""
    )
    m = scan["machine"]
    return (
        "\n".join(lines)
        + note
        + f"\n\nMeasured {m['date']} on {m['cpus']} CPUs (load average at start {m['load_average_at_start']}), "
        f"Python {m['python']}.\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--print", action="store_true", help="print the table instead of editing docs/performance.md")
    args = ap.parse_args()
    text = table()
    if args.print:
        print(text)
        return
    readme = ROOT / "docs" / "performance.md"
    source = readme.read_text()
    pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
    if not pattern.search(source):
        raise SystemExit(f"{readme} has no {START} ... {END} block")
    readme.write_text(pattern.sub(lambda _: f"{START}\n{text}{END}", source))


if __name__ == "__main__":
    main()
