"""Two costs every cold scan pays, each against its alternative, in this process's CPU time:

    python benchmarks/bench_compile_unpack.py [--rounds 3]

* compiling the 786 corpus templates in transformers' environment (``ImmutableSandboxedEnvironment`` with its
  options), with jinja's optimizer on (transformers' default) and off (what ``rendering.analysis`` compiles with);
* unpacking the bundled ``tokenizer.json`` of the seven bundled models from gzip (what ``templates_cache/`` ships)
  and from xz at the preset the bundle used before (``lzma.PRESET_EXTREME``, packed here from the same bytes).

Rounds alternate the two sides; writes benchmarks/results/compile-unpack.json with every round and the ratios of
the medians (below 1: the second side costs less).
"""

from __future__ import annotations

import argparse
import gzip
import lzma
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scan import CORPUS
from measure import ROOT, machine, write


def compile_corpus(sources: list[str], optimized: bool) -> float:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    start = time.process_time()
    for source in sources:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.optimized = optimized
        try:
            env.from_string(source)
        except Exception:  # a template that does not compile costs its parse either way
            pass
    return time.process_time() - start


def unpack(blobs: list[bytes], decompress: Any) -> float:
    start = time.process_time()
    for blob in blobs:
        decompress(blob)
    return time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    sources = [p.read_text(encoding="utf-8") for p in sorted((ROOT / CORPUS).glob("*.jinja"))]
    gz = [p.read_bytes() for p in sorted((ROOT / "templates_cache").glob("*/tokenizer.json.gz"))]
    xz = [lzma.compress(gzip.decompress(b), preset=9 | lzma.PRESET_EXTREME) for b in gz]
    rounds: dict[str, list[float]] = {"optimizer_on": [], "optimizer_off": [], "xz": [], "gzip": []}
    for _ in range(args.rounds):
        rounds["optimizer_on"].append(round(compile_corpus(sources, True), 3))
        rounds["optimizer_off"].append(round(compile_corpus(sources, False), 3))
        rounds["xz"].append(round(unpack(xz, lzma.decompress), 3))
        rounds["gzip"].append(round(unpack(gz, gzip.decompress), 3))
    medians = {k: statistics.median(v) for k, v in rounds.items()}
    data = {
        "machine": machine(),
        "command": "python benchmarks/bench_compile_unpack.py"
        + (f" --rounds {args.rounds}" if args.rounds != 3 else ""),
        "templates": len(sources),
        "bundled_tokenizers": len(gz),
        "packed_bytes": {"gzip": sum(map(len, gz)), "xz": sum(map(len, xz))},
        "cpu_seconds": rounds,
        "medians": medians,
        "ratios": {
            "compile_optimizer_off_over_on": round(medians["optimizer_off"] / medians["optimizer_on"], 3),
            "unpack_gzip_over_xz": round(medians["gzip"] / medians["xz"], 3),
        },
    }
    print(
        f"compile: optimizer on {medians['optimizer_on']:.2f}s, off {medians['optimizer_off']:.2f}s; "
        f"unpack: xz {medians['xz']:.2f}s, gzip {medians['gzip']:.2f}s"
    )
    print(write("compile-unpack", data))


if __name__ == "__main__":
    main()
