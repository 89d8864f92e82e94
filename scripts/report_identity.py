"""Prove a change changes no answer: snapshot every JSON report, then diff two snapshots with timings removed.

    python scripts/report_identity.py snapshot DIR [--corpus quick,full]   # run on the old and the new code
    python scripts/report_identity.py compare OLD_DIR NEW_DIR               # exit 1 when a report differs

A snapshot holds the audit of every bundled model and every model of the shared Hub cache (``--format json``,
offline), and the corpus scan under each scenario set asked for. Keys that measure time or the machine
(seconds, rates, dates, worker counts) are dropped before comparing, and so are the library versions
(``libraries``: what produced each side, printed by ``compare``); everything else must be equal.

The same two commands compare two library versions instead of two commits: run ``snapshot`` with the Python of
each virtual environment (``/path/to/venv/bin/python scripts/report_identity.py snapshot DIR``; the snapshot runs
this checkout's code with that interpreter's libraries), then ``compare``. CI does this at the declared floor of
every dependency (``scripts/floor_requirements.py``) against the newest; docs/dependencies.md explains how to read
a difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
TIMING_KEYS = {"seconds", "templates_per_second", "tokenizer_load_seconds", "workers", "date", "elapsed_seconds"}
VERSION_KEYS = {"libraries"}  # what produced a report: expected to differ between two library versions


def hub_repo_ids() -> list[str]:
    hub = SHARED / "hf-hub"
    return sorted(p.name[len("models--") :].replace("--", "/") for p in hub.glob("models--*"))


def run(argv: list[str], env: dict[str, str]) -> None:
    print("+", " ".join(argv), file=sys.stderr)
    done = subprocess.run([sys.executable, "-m", "tito_audit", *argv], env=env, cwd=ROOT)
    if done.returncode not in (0, 1):
        raise SystemExit(f"report_identity: {' '.join(argv)} exited {done.returncode}")


def snapshot(out: Path, corpus_sets: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_CACHE": str(SHARED / "hf-hub"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    run(["audit", "--bundled", *hub_repo_ids(), "--offline", "--format", "json", "-o", str(out / "audit.json")], env)
    for scenarios in corpus_sets:
        target = out / f"scan-{scenarios}.json"
        corpus = str(SHARED / "template-corpus")
        run(["scan", corpus, "--scenarios", scenarios, "--json", str(target), "--no-progress"], env)


def strip_timings(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: strip_timings(v)
            for k, v in value.items()
            if k not in TIMING_KEYS | VERSION_KEYS and not k.endswith("_seconds")
        }
    if isinstance(value, list):
        return [strip_timings(v) for v in value]
    return value


def first_difference(a: object, b: object, path: str = "$") -> str | None:
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert isinstance(b, dict)
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{path}.{key}: only in {'new' if key in b else 'old'}"
            found = first_difference(a[key], b[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        assert isinstance(b, list)
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {str(a)[:120]!r} != {str(b)[:120]!r}"


def libraries_line(report: object) -> str:
    """The versions a report names (``libraries``, schema 1.3), on one line; older reports name none."""
    found = report.get("libraries") if isinstance(report, dict) else None
    if not isinstance(found, dict):
        return "libraries not recorded (a report older than schema 1.3)"
    line = ", ".join(f"{k} {v}" for k, v in found.items() if k != "compat_fallbacks")
    fallbacks = found.get("compat_fallbacks") or []
    return line + (f"; compat fallbacks: {', '.join(fallbacks)}" if fallbacks else "")


def compare(old: Path, new: Path) -> int:
    names = sorted(p.name for p in old.glob("*.json"))
    differing = 0
    for name in names:
        if not (new / name).exists():
            print(f"{name}: missing in {new}")
            differing += 1
            continue
        raw_a, raw_b = json.loads((old / name).read_text()), json.loads((new / name).read_text())
        found = first_difference(strip_timings(raw_a), strip_timings(raw_b))
        print(f"{name}: {'identical' if found is None else 'DIFFERS at ' + found}")
        for side, raw in (("old", raw_a), ("new", raw_b)):
            print(f"  {side}: {libraries_line(raw)}")
        differing += found is not None
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot")
    snap.add_argument("out", type=Path)
    snap.add_argument("--corpus", default="quick,full", help="scenario sets to scan the corpus with ('' for none)")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("old", type=Path)
    cmp_.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "snapshot":
        snapshot(args.out, [s for s in args.corpus.split(",") if s])
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    raise SystemExit(main())
