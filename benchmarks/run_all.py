"""Every benchmark, then the table in docs/performance.md: ``python benchmarks/run_all.py [--smoke]``.

Runs bench_audit.py and bench_scan.py (each measurement in a fresh process, JSON into benchmarks/results/) and
rewrites the table between the benchmark markers in docs/performance.md from those files. ``--smoke`` scans only
the first 40 corpus templates, to check the scripts quickly; its numbers are not the corpus numbers and
docs/performance.md is not touched.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="a quick run of the scripts (first 40 templates)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    py = sys.executable
    subprocess.run([py, str(HERE / "bench_audit.py"), "--jobs", str(args.workers)], check=True)
    scan = [py, str(HERE / "bench_scan.py"), "--workers", str(args.workers)]
    subprocess.run(scan + (["--limit", "40"] if args.smoke else []), check=True)
    if not args.smoke:
        subprocess.run([py, str(HERE / "readme_table.py")], check=True)


if __name__ == "__main__":
    main()
