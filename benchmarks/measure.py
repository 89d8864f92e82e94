"""Run one command in a fresh process and measure it: wall time, CPU time (user + sys of the process and every
child it waited for), and peak memory of the whole process tree at once (sampled every 50 ms, as RSS and as PSS)
and of its largest single process (``ru_maxrss``).

PSS costs tens of milliseconds of kernel time per sample of a large process tree (``smaps_rollup`` walks every
mapping): sampled every 50 ms beside a scan it took half a core from the two the scan runs on, and even listing
the process tree for RSS costs a few per cent. So the timed run is not sampled at all, and the tree's peaks (RSS
and PSS) come from a second run of the same command.

CPU seconds are reported beside wall seconds because the benchmark machine is shared: wall time moves with
other people's load, CPU time much less.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHARED = Path("..") / "shared"  # the development data beside the checkout, relative to ROOT (commands run there)
ENV = {
    **os.environ,
    "HF_HUB_CACHE": os.environ.get("HF_HUB_CACHE", str(ROOT / SHARED / "hf-hub")),
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONHASHSEED": "0",
}


def _pss(pid: int) -> int:
    """Proportional set size: forked workers share the parent's pages, which RSS counts once per process."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) summed over ``pid`` and its descendants, now."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    rss = total_pss = 0
    for p in procs:
        try:
            rss += p.memory_info().rss
            total_pss += _pss(p.pid)
        except psutil.NoSuchProcess:
            pass
    return rss, total_pss


def run(cmd: list[str], timeout: float = 3600) -> dict[str, Any]:
    """``cmd`` timed in a fresh process, then run again for its memory peaks; the timed run's stdout (or its
    last line) is parsed as JSON when it is JSON."""
    timed = _run_once(cmd, timeout, sample=False)
    sampled = _run_once(cmd, timeout, sample=True)
    timed["peak_rss_tree_mb"], timed["peak_pss_tree_mb"] = sampled["peak_rss_tree_mb"], sampled["peak_pss_tree_mb"]
    return timed


def timed(cmd: list[str], timeout: float = 3600) -> dict[str, Any]:
    """``cmd`` timed once in a fresh process, without memory sampling (for many short paired runs)."""
    return _run_once(cmd, timeout, sample=False)


def _run_once(cmd: list[str], timeout: float, sample: bool, sample_s: float = 0.05) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0, 0]
    done = threading.Event()

    def sample_memory() -> None:
        while not done.is_set():
            rss, tree_pss = _tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], tree_pss)
            done.wait(sample_s)

    sampler = threading.Thread(target=sample_memory, daemon=True) if sample else None
    if sampler is not None:
        sampler.start()
    out_chunks: list[str] = []
    err_chunks: list[str] = []
    readers = [
        threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()), daemon=True),  # type: ignore[union-attr]
        threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()), daemon=True),  # type: ignore[union-attr]
    ]
    for r in readers:
        r.start()
    _, status, usage = os.wait4(proc.pid, 0)  # rusage of this child and the children it waited for
    wall = time.perf_counter() - started
    done.set()
    for r in readers:
        r.join(timeout)
    if sampler is not None:
        sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = "".join(out_chunks), "".join(err_chunks)
    result: dict[str, Any] = {
        "command": " ".join(cmd),
        "rc": proc.returncode,
        "wall_seconds": round(wall, 3),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_tree_mb": round(peak[0] / 2**20, 1),  # counts pages forked workers share once per process
        "peak_pss_tree_mb": round(peak[1] / 2**20, 1),  # shared pages split between the processes sharing them
        "max_rss_one_process_mb": round(usage.ru_maxrss / 1024, 1),
    }
    for candidate in (stdout, (stdout.strip().splitlines() or [""])[-1]):  # the whole output, or its last line
        try:
            result["output"] = json.loads(candidate)
            break
        except json.JSONDecodeError:
            continue
    if proc.returncode not in (0, 1):
        result["stderr_tail"] = stderr[-2000:]
    return result


# the libraries a figure depends on: a release can change what a render or a scan costs (and its verdicts)
MEASURED_LIBRARIES = ("tito-audit", "transformers", "tokenizers", "jinja2", "hypothesis", "huggingface_hub", "torch")


def machine() -> dict[str, Any]:
    """Where and on what a figure was measured: the machine, its load, the checkout's commit (``-dirty`` with
    uncommitted changes) and the installed releases of the libraries it depends on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in load] if load else None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "commit": _commit(),
        "libraries": _libraries(),
    }


def _commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _libraries() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in MEASURED_LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def write(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]
