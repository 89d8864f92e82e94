"""A cold ``tito-audit --help`` and a cold ``tito-audit audit MODEL -q`` before and after a change, measured in the
same run: runs alternate (before, after, after, before: ABBA, so that neither side always runs first), each a
fresh process, so that both sides see the same machine load.

    python benchmarks/bench_cold_start_paired.py --before REF [--pairs 8] [--model Qwen/Qwen3-0.6B] [--name NAME]

``REF`` is a git commit of this repository, exported (``git archive``) to a temporary folder and run from there;
the working tree is the "after" side. Both trees are byte-compiled first, as an installed package is. Writes
benchmarks/results/NAME.json: per command and side the wall and CPU seconds of every run and their medians, and
the ratio after/before of the medians (CPU seconds move less than wall seconds on a shared machine).
"""

from __future__ import annotations

import argparse
import compileall
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan_paired import export
from measure import ROOT, machine, timed, write

_CLI = "import sys; from tito_audit.cli import main; sys.argv = ['tito-audit', *sys.argv[1:]]; main()"


def command(tree: Path, args: list[str]) -> list[str]:
    """``tito-audit ARGS`` run with the code of ``tree`` (first on the path, whatever is installed)."""
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); " + _CLI.removeprefix("import sys; ")
    return [sys.executable, "-c", code, *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the git commit to compare the working tree with")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--name", default="cold-start-paired")
    args = parser.parse_args()
    commands = {"help": ["--help"], "audit": ["audit", args.model, "-q"]}
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"before": export(args.before, Path(tmp) / "before"), "after": ROOT}
        for tree in sides.values():
            compileall.compile_dir(tree / "tito_audit", quiet=1)
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {s: [] for s in sides} for c in commands}
        at_start = machine()
        for k in range(args.pairs):
            order = ("before", "after") if k % 2 == 0 else ("after", "before")
            for name, argv in commands.items():
                for side in order:
                    runs[name][side].append(timed(command(sides[side], argv)))
    result: dict[str, Any] = {
        "machine": at_start,
        "command": " ".join(["python benchmarks/bench_cold_start_paired.py", *sys.argv[1:]]),
        "before": args.before,
        "pairs": args.pairs,
    }
    for name, argv in commands.items():
        per_side = {}
        for side, done in runs[name].items():
            per_side[side] = {
                "wall_seconds_median": round(statistics.median(r["wall_seconds"] for r in done), 3),
                "cpu_seconds_median": round(statistics.median(r["cpu_seconds"] for r in done), 3),
                "wall_seconds": [r["wall_seconds"] for r in done],
                "cpu_seconds": [r["cpu_seconds"] for r in done],
            }
        result[name] = {
            "argv": ["tito-audit", *argv],
            **per_side,
            "cpu_ratio": round(per_side["after"]["cpu_seconds_median"] / per_side["before"]["cpu_seconds_median"], 3),
            "wall_ratio": round(
                per_side["after"]["wall_seconds_median"] / per_side["before"]["wall_seconds_median"], 3
            ),
        }
    path = write(args.name, result)
    for name in commands:
        r = result[name]
        print(
            f"{name}: CPU {r['before']['cpu_seconds_median']} s -> {r['after']['cpu_seconds_median']} s "
            f"({r['cpu_ratio']}x), wall {r['wall_ratio']}x"
        )
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
