"""Time three `tito-audit rl` steps on CPU with the full Qwen vocabulary; writes benchmarks/results/rl.json.

Run: HF_HUB_CACHE=/work/shared/hf-hub HF_HUB_OFFLINE=1 python benchmarks/bench_rl.py [MODEL]
"""

from __future__ import annotations

import json
import platform
import resource
import sys
import time
from pathlib import Path

import torch

from tito_audit.rl import RLConfig, run_rl


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "Qwen/Qwen3-0.6B"
    t = time.perf_counter()
    res = run_rl(RLConfig(model=model, steps=3, device="cpu", vocab="full"))
    wall = time.perf_counter() - t
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    out = {
        "model": model,
        "steps": 3,
        "vocab": res.setup["model_vocab"],
        "parameters": res.setup["parameters"],
        "wall_seconds": wall,
        "step_seconds": [s["seconds"] for s in res.steps],
        "setup_seconds": res.setup["setup_seconds"],
        "max_rss_gb": rss_gb,
        "cosine_min": res.summary["cosine_min"],
        "rel_error_max": res.summary["rel_error_max"],
        "targets": {"wall_seconds_lt": 60, "max_rss_gb_lt": 6},
        "meets_targets": wall < 60 and rss_gb < 6,
        "machine": {
            "cpus": torch.get_num_threads(),
            "torch": torch.__version__,
            "python": platform.python_version(),
        },
    }
    path = Path(__file__).parent / "results" / "rl.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
