"""Prove a change changes no answer: snapshot every JSON report, then diff two snapshots with timings removed.

    python scripts/report_identity.py snapshot DIR [--corpus quick,full]   # run on the old and the new code
    python scripts/report_identity.py snapshot DIR --with all --inputs IN  # + every command's other outputs
    python scripts/report_identity.py compare OLD_DIR NEW_DIR               # exit 1 when a report differs

A snapshot holds the audit of every bundled model and every model of the shared Hub cache (``--format json``,
offline), and the corpus scan under each scenario set asked for. Keys that measure time or the machine
(seconds, rates, dates, worker counts) are dropped before comparing, and so are the library versions
(``libraries``: what produced each side, printed by ``compare``); everything else must be equal.

``--with`` adds the outputs of the other commands and formats (a restructure must keep every one of them):
``formats`` (two audits as terminal, Markdown, HTML and SARIF text), ``fix`` (JSON and the patched template),
``table``, ``replay`` (rollout logs of correct and broken loops, replayed as JSON and terminal text, and with
``--weights`` on a small seeded policy) and ``rl`` (the gradient loop's JSON summary on the seeded stand-in).
``replay`` and ``rl`` need torch. Their inputs (logs, policies) are written once into ``--inputs`` by the code
that runs first and read from there by every later snapshot, so that both sides replay the same bytes. Text
outputs are compared as they are, with durations (``12.3 s``) masked.

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
import re
import shutil
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


EXTRAS = ("formats", "fix", "table", "replay", "rl")
DURATION = re.compile(r"\b\d+(\.\d+)? ?(s|ms|seconds)\b")


def run(argv: list[str], env: dict[str, str], stdout: Path | None = None, ok: tuple[int, ...] = (0, 1)) -> None:
    print("+", " ".join(argv), file=sys.stderr)
    with open(stdout, "w") if stdout else open(os.devnull, "w") as sink:
        done = subprocess.run([sys.executable, "-m", "tito_audit", *argv], env=env, cwd=ROOT, stdout=sink)
    if done.returncode not in ok:
        raise SystemExit(f"report_identity: {' '.join(argv)} exited {done.returncode}")


def script(name: str, argv: list[str], env: dict[str, str]) -> None:
    print("+", name, " ".join(argv), file=sys.stderr)
    subprocess.run([sys.executable, str(ROOT / "scripts" / name), *argv], env=env, cwd=ROOT, check=True)


def snapshot(out: Path, corpus_sets: list[str], extras: list[str], inputs: Path | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(SHARED / "hf-hub"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "120",
    }
    # exit 3: a SAFE that does not cover what was not probed (issue 40's coverage), or a check that errored: the
    # report is written all the same, and compared
    audit_all = ["audit", "--bundled", *hub_repo_ids(), "--offline", "--format", "json", "-o", str(out / "audit.json")]
    run(audit_all, env, ok=(0, 1, 3))
    for scenarios in corpus_sets:
        target = out / f"scan-{scenarios}.json"
        corpus = str(SHARED / "template-corpus")
        run(["scan", corpus, "--scenarios", scenarios, "--json", str(target), "--no-progress"], env)
    if "formats" in extras:
        for model in ("qwen3-0.6b", "Qwen/Qwen2.5-7B-Instruct"):
            stem = model.replace("/", "_")
            for fmt, suffix in (("terminal", "txt"), ("markdown", "md"), ("html", "html"), ("sarif", "sarif")):
                run(["audit", model, "--offline", "--format", fmt, "-o", str(out / f"audit-{stem}.{suffix}")], env)
        run(["audit", "qwen3-0.6b", "--offline"], env, stdout=out / "audit-stdout.txt")
        corpus = str(SHARED / "template-corpus")
        scan_out = ["--markdown", str(out / "scan-limit.md"), "--html", str(out / "scan-limit.html")]
        run(["scan", corpus, "--limit", "40", "--no-progress", *scan_out], env, stdout=out / "scan-limit.txt")
    if "fix" in extras:
        for model in ("qwen3-0.6b", "deepseek-ai/DeepSeek-V3"):
            stem = model.replace("/", "_")
            run(["fix", model, "--offline", "--format", "json"], env, stdout=out / f"fix-{stem}.json")
            run(["fix", model, "--offline", "-o", str(out / f"fix-{stem}.jinja")], env, stdout=out / f"fix-{stem}.txt")
    if "table" in extras:
        run(["table", "qwen3-0.6b", "qwen2.5-7b-instruct", "--offline", "-o", str(out / "table.md")], env)
    if extras and ("replay" in extras or "rl" in extras):
        inputs = inputs or out / "inputs"
        if not (inputs / "done").exists():
            make_inputs(inputs, env)
    if "replay" in extras:
        assert inputs is not None
        for log in sorted(inputs.glob("*.jsonl")):
            base = ["replay", str(log), "--model", "qwen3-0.6b", "--workers", "1"]
            run([*base, "--format", "json", "-o", str(out / f"replay-{log.stem}.json")], env)
            run(base, env, stdout=out / f"replay-{log.stem}.txt")
        weights = inputs / "weights"
        for loop in ("correct", "naive_retokenize"):
            base = ["replay", str(weights / loop / "log.jsonl"), "--model", "qwen3-0.6b", "--workers", "1"]
            base += ["--weights", str(weights / loop / "policy"), "--sampling", '{"top_k": 20}']
            run([*base, "--format", "json", "-o", str(out / f"replay-weights-{loop}.json")], env)
    if "rl" in extras:
        for model in ("qwen3-0.6b", "qwen2.5-7b-instruct"):
            argv = ["rl", model, "--steps", "1", "--groups", "1", "--group-size", "2", "--json"]
            run(argv, env, stdout=out / f"rl-{model}.json", ok=(0, 1, 3))
            argv = ["rl", model, "--steps", "1", "--noncanonical-rate", "0.2", "--json"]
            run(argv, env, stdout=out / f"rl-{model}-noncanonical.json", ok=(0, 1, 3))


def make_inputs(inputs: Path, env: dict[str, str]) -> None:
    """Rollout logs and seeded policies, written once by the code that runs first (see the module docstring)."""
    if inputs.exists():
        shutil.rmtree(inputs)
    inputs.mkdir(parents=True)
    for loop in ("correct", "naive_retokenize", "stop_seam", "arguments_reserialized", "prefix_fallback"):
        script("make_replay_log.py", ["qwen3-0.6b", loop, str(inputs / f"{loop}.jsonl")], env)
    for loop in ("correct", "naive_retokenize"):
        argv = ["qwen3-0.6b", loop, str(inputs / "weights" / loop), "--episodes", "6"]
        script("make_replay_weights_demo.py", argv, env)
    (inputs / "done").write_text("")


def strip_timings(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: strip_timings(v)
            for k, v in value.items()
            if k not in TIMING_KEYS | VERSION_KEYS and "seconds" not in k and not k.endswith("per_second")
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


def compare_text(old: Path, new: Path) -> str | None:
    """The first differing line, with durations and each snapshot's own folder (in "wrote DIR/...") masked."""
    a = DURATION.sub("<t>", old.read_text(encoding="utf-8").replace(str(old.parent), "<snapshot>")).splitlines()
    b = DURATION.sub("<t>", new.read_text(encoding="utf-8").replace(str(new.parent), "<snapshot>")).splitlines()
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"line {k + 1}: {x[:100]!r} != {y[:100]!r}"
    return None if len(a) == len(b) else f"{len(a)} lines != {len(b)}"


def compare(old: Path, new: Path) -> int:
    names = sorted(p.name for p in old.iterdir() if p.is_file())
    differing = 0
    for name in names:
        if not (new / name).exists():
            print(f"{name}: missing in {new}")
            differing += 1
            continue
        if not name.endswith(".json"):
            found_text = compare_text(old / name, new / name)
            print(f"{name}: {'identical' if found_text is None else 'DIFFERS at ' + found_text}")
            differing += found_text is not None
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
    snap.add_argument("--with", dest="extras", default="", help=f"comma-separated: {', '.join(EXTRAS)} or all")
    snap.add_argument("--inputs", type=Path, help="replay/rl inputs: read from here, written here when missing")
    cmp_ = sub.add_parser("compare")
    cmp_.add_argument("old", type=Path)
    cmp_.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "snapshot":
        extras = list(EXTRAS) if args.extras == "all" else [e for e in args.extras.split(",") if e]
        unknown = sorted(set(extras) - set(EXTRAS))
        if unknown:
            parser.error(f"--with: unknown {unknown}; known: {', '.join(EXTRAS)}")
        snapshot(args.out, [s for s in args.corpus.split(",") if s], extras, args.inputs)
        return 0
    return compare(args.old, args.new)


if __name__ == "__main__":
    raise SystemExit(main())
