"""Where one default audit's CPU goes, phase by phase, and what coverage's instrumented copy costs per render.

    python benchmarks/bench_audit_phases.py [--models gpt-oss-20b ...] [--checkout DIR] [--name audit-phases]

Each model is audited in a fresh process (``python -m tito_audit audit MODEL --format json``, offline, the
default search), with the functions behind each phase wrapped to add up the process CPU seconds spent inside them:
loading the model (``sources.load.load``: tokenizer and template), playing the scenarios, the checks, the search
(``search_after_checks``, with the coverage it steers). Every render the search makes through coverage's
instrumented copy (``Coverage.play``: its probes, and its macros rendered once per input, ``rendering.macro_memo``)
is timed, then made again plainly (``render_text``, as the checks render) and timed: the two CPU sums (this thread's
CPU clock: on this machine the process clock moves in steps of milliseconds, and a render takes less), and whether
every text was the same (``texts_equal``; it and the ratio are null where no render was compared; the plain renders
are extra work, so ``total`` is not an audit's cost).
Over the corpus (``../shared/template-corpus``), beside it: how many templates define a macro, how many macros
they define and how many of those ``macro_memo`` memoizes, and the CPU its reading took per such template.
``--checkout DIR``: the code of another checkout (a ``git worktree`` of an older commit) is measured instead.
Writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import CORPUS
from measure import ENV, ROOT, machine, write

_CHILD = r"""
import json, sys, time
from tito_audit.audit import runner
try:
    from tito_audit.audit import coverage
except ImportError:  # an older checkout, before template coverage
    coverage = None
from tito_audit.rendering.template_inputs import render_text
from tito_audit.sources import load

seconds = {}
renders = {"instrumented": 0.0, "plain": 0.0, "count": 0, "texts_equal": True}

def timed(owner, name, phase):
    inner = getattr(owner, name, None)
    if inner is None:  # an older checkout, before that phase
        return
    def wrapper(*args, **kwargs):
        started = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            seconds[phase] = seconds.get(phase, 0.0) + time.process_time() - started
    setattr(owner, name, wrapper)

timed(load, "load", "load")
timed(runner, "_scenarios", "scenarios")
timed(runner, "_run_checks", "checks")
timed(runner, "search_after_checks", "search")
play = getattr(getattr(coverage, "Coverage", None), "play", None)

def measured_play(self, renderer, messages, tools, agp):
    started = time.thread_time()
    text = play(self, renderer, messages, tools, agp)
    renders["instrumented"] += time.thread_time() - started
    started = time.thread_time()
    plain = render_text(renderer.tokenizer, renderer.chat_template, messages, tools, agp, renderer.template_kwargs)
    renders["plain"] += time.thread_time() - started
    renders["count"] += 1
    renders["texts_equal"] = renders["texts_equal"] and plain == text
    return text

if play is not None:
    coverage.Coverage.play = measured_play
from tito_audit.cli import main

sys.argv = ["tito-audit", "audit", sys.argv[1], "--format", "json"]
started = time.process_time()
try:
    main()
except SystemExit:
    pass
seconds["total"] = time.process_time() - started
if not renders["count"]:  # nothing compared (a checkout before coverage, or no search): no claim of equal texts
    renders["texts_equal"] = None
measured = {"seconds": {k: round(v, 3) for k, v in seconds.items()}, "renders": renders}
print("PHASES " + json.dumps(measured), file=sys.stderr)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["gpt-oss-20b", "qwen2.5-7b-instruct"])
    parser.add_argument("--checkout", default=str(ROOT))
    parser.add_argument("--name", default="audit-phases")
    args = parser.parse_args()
    out: dict[str, object] = {
        "machine": machine(),
        "command": "python benchmarks/bench_audit_phases.py " + " ".join(sys.argv[1:]),
        "checkout": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=args.checkout, capture_output=True, text=True
        ).stdout.strip(),
        "models": {},
    }
    for model in args.models:
        env = {**ENV, "PYTHONPATH": args.checkout}
        command = [sys.executable, "-c", _CHILD, model]
        done = subprocess.run(command, cwd=args.checkout, env=env, capture_output=True, text=True, check=True)
        line = next(x for x in done.stderr.splitlines() if x.startswith("PHASES "))  # stdout holds the report
        measured = json.loads(line.removeprefix("PHASES "))
        renders = measured["renders"]
        compared = renders["count"] and renders["plain"] > 0
        renders["instrumented_over_plain"] = round(renders["instrumented"] / renders["plain"], 3) if compared else None
        renders["instrumented"], renders["plain"] = round(renders["instrumented"], 3), round(renders["plain"], 3)
        out["models"][model] = measured  # type: ignore[index]
        print(model, json.dumps(measured))
    if args.checkout == str(ROOT) and CORPUS.is_dir():
        out["corpus_macros"] = corpus_macros()
        print("corpus", out["corpus_macros"])
    print(write(args.name, out))


def corpus_macros() -> dict[str, float]:
    """The corpus templates that define a macro, their macros (at the top level: the memo's candidates), those
    memoized, and the reading's CPU per template."""
    import ast
    import re

    from tito_audit.rendering.analysis import template_code
    from tito_audit.rendering.macro_memo import memoize_macros

    templates = macros = memoized = 0
    spent = 0.0
    for path in sorted(CORPUS.glob("*.jinja")):
        try:
            code = template_code(path.read_text(encoding="utf-8"))
        except Exception:
            continue
        if "= Macro(environment, macro," not in code:
            continue
        tree = ast.parse(code)
        templates += 1
        macros += len(set(re.findall(r"l_0_(\w+) = Macro\(environment, macro,", code)))  # the top level's
        started = time.thread_time()
        memoized += len(memoize_macros(tree))
        spent += time.thread_time() - started
    return {
        "templates": templates,
        "macros": macros,
        "memoized": memoized,
        "ms_per_template": round(1000 * spent / max(templates, 1), 2),
    }


if __name__ == "__main__":
    main()
