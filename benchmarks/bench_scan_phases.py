"""Where the default scan's CPU goes, phase by phase: the scan in one process, each phase's own CPU seconds.

    python benchmarks/bench_scan_phases.py [--name scan-phases] [--every N]

The default scan (quick scenarios, ``--tokenizer auto``, no search) runs in this process (``workers=0``, set up as
a scan worker is: ``gc.set_threshold(5000, 10, 10)``), and the functions behind each phase are wrapped to add up
the process CPU time spent inside them, less what nested wrapped phases spent (so every second counts once):
loading the candidate tokenizers, compiling each template and reading its facts (``analysis.template_facts``), the
role probes (``control_tokens.role_literals``), the synthesized tokenizers, playing the scenarios (the simulations
``runner._scenarios`` asks for), the checks, coverage's reading and instrumented copy (``Coverage.of``) and its
replay of the renders (``Coverage.trace``, with the renders pending and played), the search. ``other``: what no
phase holds (the picker, the scan's bookkeeping). ``bench_scan_split.py`` splits the same run by library instead.
Writes benchmarks/results/NAME.json.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import CORPUS
from measure import ENV, ROOT, machine, write


class Phases:
    """Process CPU seconds per phase, each wrapped call's own (its wrapped callees' taken out)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._inner: list[float] = []

    def wrap(self, owner: Any, name: str, phase: str) -> None:
        original = getattr(owner, name)
        phases = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            phases._inner.append(0.0)
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.process_time() - started
                phases.seconds[phase] = phases.seconds.get(phase, 0.0) + spent - phases._inner.pop()
                if phases._inner:
                    phases._inner[-1] += spent

        setattr(owner, name, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="scan-phases")
    parser.add_argument("--every", type=int, default=1, help="scan every N-th corpus template (1: all)")
    args = parser.parse_args()
    os.environ.update({k: ENV[k] for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")})
    sys.path.insert(0, str(ROOT))
    import tito_audit.scan as scan
    from tito_audit.audit import runner
    from tito_audit.audit.coverage import Coverage
    from tito_audit.rendering import analysis
    from tito_audit.scan import template_audit
    from tito_audit.scan.discover import discover
    from tito_audit.scan.pool import PoolLimits

    phases = Phases()
    phases.wrap(scan, "load_tokenizers", "load tokenizers")
    phases.wrap(analysis, "template_facts", "compile and read facts")
    phases.wrap(template_audit, "role_literals", "role probes")
    phases.wrap(template_audit, "_synthesized", "synthesized tokenizers")
    phases.wrap(template_audit, "_dynamic_flags", "dynamic flags")
    phases.wrap(runner, "_scenarios", "play scenarios")
    phases.wrap(runner, "_run_checks", "checks")
    phases.wrap(runner, "search_after_checks", "search")
    phases.wrap(Coverage, "trace", "coverage replay")
    replays = {"pending": 0, "played": 0}
    trace = Coverage.trace

    def counted(self: Coverage, until_complete: bool = False) -> None:
        replays["pending"] += len(self.renderer._shared.untraced)
        before = self.replayed
        trace(self, until_complete)
        replays["played"] += self.replayed - before

    Coverage.trace = counted  # type: ignore[method-assign]
    phases.wrap(Coverage, "of", "coverage reading")  # the class's bound method, set back as a plain function

    corpus = ROOT / CORPUS
    paths = [t.path for t in discover(corpus)][:: args.every]
    gc.set_threshold(5000, 10, 10)
    started = time.process_time()
    summary = scan.scan_directory(paths, scan.AUTO, limits=PoolLimits(workers=0), offline=True)
    total = time.process_time() - started
    parts = {k: round(v, 2) for k, v in sorted(phases.seconds.items(), key=lambda kv: -kv[1])}
    parts["other"] = round(total - sum(phases.seconds.values()), 2)
    result = {
        "machine": machine(),
        "command": f"python benchmarks/bench_scan_phases.py --name {args.name} --every {args.every}",
        "corpus": str(CORPUS),
        "templates": len(summary.results),
        "counts": summary.counts,
        "cpu_seconds": round(total, 2),
        "phases_cpu_seconds": parts,
        "phases_share": {k: round(v / total, 3) for k, v in parts.items()},
        "coverage_renders": replays,
    }
    write(args.name, result)
    print(f"{total:.1f} s CPU: " + ", ".join(f"{k} {v}" for k, v in parts.items()) + f"; replays {replays}")


if __name__ == "__main__":
    main()
