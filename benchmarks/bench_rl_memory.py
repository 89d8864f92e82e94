"""Peak memory per parameter of `tito-audit rl --weights` on CPU, with small real-architecture models.

Whether a 7B model fits on one GPU depends on what the loop holds *per parameter* beyond the weights (gradients
held or accumulating, optimiser state, model copies); activations and logits depend on the tokens instead. Both
are separated by measurement. Each case is one model architecture at two widths, and each width runs twice, on
the batch and on the same batch twice over (``--group-size`` 2 and 4 over the same two scenarios; one micro-batch
each), every run in a fresh process:

    activations(w)  = peak(2 T) - peak(T)                      what doubles with the tokens
    per-parameter   = [ (peak_w2(T) - act(w2)) - (peak_w1(T) - act(w1)) ] / (params_w2 - params_w1)

The loop forwards and backwards one view at a time, so activations should not grow with the batch: the doubled
batch measures that (it did not grow: ``activations`` is a few MB). The slope therefore still holds one view's
activations, which grow with the width: it bounds the per-parameter cost from above. It also holds the weights
themselves (they become resident as the run touches them), so "beyond the weights" is the slope minus the
weight's element size. RSS is sampled every 2 ms from /proc/self/statm from the
moment the weights are loaded to the end of the run, with glibc's mmap threshold fixed at 128 KB so that freed
tensors leave the RSS (``MALLOC_MMAP_THRESHOLD_``; otherwise freed heap stays counted).

Cases: ``layers``, a 7B model's proportions (8 Qwen3 layers over the compacted vocabulary of the ids the run uses,
written as ``--save-policy`` does, no parameter above 4 % of the model); ``tied``, Qwen3 with its full 151,936-row
tied head and one layer, where one matrix holds nearly every parameter and autograd sums its two gradient
contributions before the comparison sees it: the worst case of the streamed comparison. ``--code DIR`` measures
another checkout (the code before the streamed comparison, for instance) with the same script.

Run: HF_HUB_CACHE=../shared/hf-hub HF_HUB_OFFLINE=1 python benchmarks/bench_rl_memory.py
Writes benchmarks/results/rl-memory.json (``--out=NAME`` for another file, ``--cases=``, ``--dtypes=``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen3-0.6B"
RUN = dict(groups=1, steps=1, scenarios=("single_call/plain", "two_calls/plain"), rollouts="template", device="cpu")
CASES: dict[str, dict[str, Any]] = {
    "layers": dict(
        widths=(512, 1024),
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        tie_word_embeddings=True,
        compact=True,
    ),
    "tied": dict(
        widths=(256, 1024),
        vocab_size=151936,
        intermediate_size=512,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
        compact=False,
    ),
}


class _Peak:
    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self.start = 0
        self.stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def reset(self) -> None:
        self.start = self.peak = self.rss()

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.002)


def child(folder: str, dtype: str, group_size: int) -> None:
    from tito_audit.rl import RLConfig, run_rl
    from tito_audit.rl import loop as rl_loop

    meter = _Peak()
    load = rl_loop.load_weights

    def measured_load(*args: Any, **kw: Any) -> Any:
        out = load(*args, **kw)
        meter.reset()  # from here on: the loop's own memory
        return out

    rl_loop.load_weights = measured_load  # type: ignore[assignment]
    extra = {"dtype": dtype} if "dtype" in RLConfig.__dataclass_fields__ else {}
    t = time.perf_counter()
    res = run_rl(RLConfig(model=MODEL, weights=folder, group_size=group_size, **RUN, **extra))  # type: ignore[arg-type]
    meter.stop.set()
    steps = res.steps
    print(
        json.dumps(
            {
                "parameters": res.setup["parameters"],
                "rss_after_load": meter.start,
                "peak_rss": meter.peak,
                "seconds": time.perf_counter() - t,
                "sequences": steps[0]["alignment"]["sequences"],
                "corrupted": res.summary["corrupted"],
            }
        )
    )


def _compact_ids() -> list[int]:
    from tito_audit.policy.model import VocabMap
    from tito_audit.rl import RLConfig
    from tito_audit.rl.template_episodes import TemplateEpisodes, used_ids

    template = TemplateEpisodes(RLConfig(model=MODEL, **RUN))  # type: ignore[arg-type]
    ids = VocabMap.compact(used_ids(template.episodes, template.stops)).model_to_tok
    assert ids is not None
    return ids


def _build(case: str, width: int, folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    spec = {k: v for k, v in CASES[case].items() if k not in ("widths", "compact")}
    ids = _compact_ids() if CASES[case]["compact"] else None
    if ids is not None:
        spec |= {"vocab_size": len(ids), "intermediate_size": 3 * width}
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(Qwen3Config(hidden_size=width, **spec)).save_pretrained(folder)
    if ids is not None:
        (folder / "tito_vocab_map.json").write_text(json.dumps({"model_to_tok": ids}))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    code = Path(flags.get("code", ROOT)).resolve()
    dtypes = flags.get("dtypes", "float32,bfloat16").split(",")
    cases = flags.get("cases", "layers,tied").split(",")
    import torch

    tmp = Path(tempfile.mkdtemp())
    env = {
        **os.environ,
        "PYTHONPATH": str(code),
        "OMP_NUM_THREADS": "1",
        "MALLOC_MMAP_THRESHOLD_": "131072",
        "MALLOC_TRIM_THRESHOLD_": "131072",
    }
    result: dict[str, Any] = {
        "command": "python benchmarks/bench_rl_memory.py " + " ".join(sys.argv[1:]),
        "code": str(code) if code != ROOT else "this checkout",
        "run": {k: list(v) if isinstance(v, tuple) else v for k, v in RUN.items()} | {"model": MODEL},
        "cases": {k: {kk: list(vv) if isinstance(vv, tuple) else vv for kk, vv in v.items()} for k, v in CASES.items()},
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()},
        "by_case": {},
    }
    path = ROOT / "benchmarks" / "results" / flags.get("out", "rl-memory.json")
    for case in cases:
        folders = {w: tmp / f"{case}{w}" for w in CASES[case]["widths"]}
        for w, folder in folders.items():
            _build(case, w, folder)
        for dtype in dtypes:
            rows = []
            for width, folder in folders.items():
                row: dict[str, Any] = {"width": width}
                for size in (2, 4):
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", str(folder), dtype, str(size)],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=ROOT,
                    )
                    row[f"group_size_{size}"] = json.loads(out.stdout.strip().splitlines()[-1])
                    print(case, dtype, width, size, row[f"group_size_{size}"], flush=True)
                one, two = row["group_size_2"], row["group_size_4"]
                row["parameters"] = one["parameters"]
                row["activations"] = two["peak_rss"] - one["peak_rss"]
                row["peak_without_activations"] = one["peak_rss"] - row["activations"]
                rows.append(row)
            d_params = rows[1]["parameters"] - rows[0]["parameters"]
            slope = (rows[1]["peak_without_activations"] - rows[0]["peak_without_activations"]) / d_params
            raw = (rows[1]["group_size_2"]["peak_rss"] - rows[0]["group_size_2"]["peak_rss"]) / d_params
            element = 4 if dtype == "float32" else 2
            result["by_case"][f"{case} {dtype}"] = {
                "runs": rows,
                "bytes_per_parameter": slope,
                "bytes_per_parameter_with_activations": raw,
                "weight_bytes_per_parameter": element,
                "bytes_per_parameter_beyond_weights": slope - element,
            }
            path.write_text(json.dumps(result, indent=1))  # after every case: a run cut short keeps the others
    print(json.dumps({k: round(v["bytes_per_parameter_beyond_weights"], 2) for k, v in result["by_case"].items()}))


if __name__ == "__main__":
    main()
