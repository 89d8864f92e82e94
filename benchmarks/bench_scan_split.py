"""Where the default scan's CPU goes, against chatlint 0.1.2's whole run: how much of it is transformers' own work.

    python benchmarks/bench_scan_split.py [--name scan-cost-split]

The default scan (quick scenarios, ``--tokenizer auto``) runs in this one process (``workers=0``, so that one
thread's CPU clock sees all of it), with three parts timed by that clock: loading the candidate tokenizers
(transformers' ``from_pretrained``), compiling each template (jinja's ``Environment.compile`` under
transformers' ``_compile_jinja_template``), and every render (transformers' compiled template given
``apply_chat_template``'s inputs, ``rendering.template_inputs``, with the sandbox's work inside it and the
preparation of those inputs; and the sanitized encodes ``apply_chat_template`` does whole). Everything else is
tito-audit's own: the render limits and caches, tokenization outside ``apply_chat_template``, the simulated
rollouts, checks and verdicts.
chatlint then runs once on the same corpus (its CPU time from the kernel, as in measure.py), one process too.
Writes benchmarks/results/NAME.json with the parts in seconds and as a share of chatlint's CPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import CORPUS
from measure import ENV, ROOT, machine, timed, write


class _Clock:
    """Thread CPU time spent inside wrapped calls, outermost calls only (a compile inside a render counts once, as
    compile)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inside: str | None = None

    def wrap(self, owner: Any, name: str, part: str) -> None:
        original = getattr(owner, name)
        clock = self

        def timed_call(*args: Any, **kwargs: Any) -> Any:
            if clock._inside is not None and clock._inside != "render":
                return original(*args, **kwargs)
            outer = clock._inside
            started = time.thread_time()
            clock._inside = part
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.thread_time() - started
                clock._inside = outer
                clock.seconds[part] = clock.seconds.get(part, 0.0) + spent
                if outer is not None:  # a compile inside a render: taken out of the render's share
                    clock.seconds[outer] = clock.seconds.get(outer, 0.0) - spent

        setattr(owner, name, timed_call)


def split_scan(corpus: Path) -> dict[str, Any]:
    import os

    os.environ.update({k: ENV[k] for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")})
    sys.path.insert(0, str(ROOT))
    import jinja2

    import tito_audit.scan as scan
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.scan.pool import PoolLimits

    clock = _Clock()
    clock.wrap(scan, "load_tokenizers", "load")
    clock.wrap(jinja2.Environment, "compile", "compile")
    clock.wrap(Renderer, "_apply", "render")  # apply_chat_template: masks, sanitized encodes transformers does whole
    clock.wrap(Renderer, "_text", "render")  # the compiled template, given apply_chat_template's inputs
    started = time.thread_time()
    summary = scan.scan_directory(str(corpus), scan.AUTO, limits=PoolLimits(workers=0), offline=True)
    total = time.thread_time() - started
    parts = {k: round(v, 2) for k, v in clock.seconds.items()}
    parts["tito_audit_rest"] = round(total - sum(clock.seconds.values()), 2)
    return {"templates": len(summary.results), "counts": summary.counts, "cpu_seconds": round(total, 2), "parts": parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="scan-cost-split")
    args = parser.parse_args()
    corpus = ROOT / CORPUS
    lint = timed(["chatlint", "--templates", str(corpus), "--json"])
    ours = split_scan(corpus)
    lint_cpu = lint["cpu_seconds"]
    transformers = sum(ours["parts"].get(k, 0.0) for k in ("load", "compile", "render"))
    result = {
        "machine": machine(),
        "command": f"python benchmarks/bench_scan_split.py --name {args.name}",
        "corpus": str(CORPUS),
        "chatlint": {"version": version("chatlint"), "cpu_seconds": lint_cpu, "wall_seconds": lint["wall_seconds"]},
        "scan_one_process": ours,
        "transformers_seconds": round(transformers, 2),
        "share_of_chatlint_cpu": {k: round(v / lint_cpu, 3) for k, v in ours["parts"].items()},
        "transformers_share_of_chatlint_cpu": round(transformers / lint_cpu, 3),
    }
    write(args.name, result)
    print(
        f"chatlint {lint_cpu}s CPU; scan in one process {ours['cpu_seconds']}s: "
        + ", ".join(f"{k} {v}s" for k, v in ours["parts"].items())
        + f"; transformers' parts {transformers:.1f}s = {transformers / lint_cpu:.2f}x chatlint's whole run"
    )


if __name__ == "__main__":
    main()
