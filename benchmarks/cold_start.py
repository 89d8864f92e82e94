"""Cold start: one model audited by a fresh ``tito-audit`` process, against a fresh process that only loads the
same tokenizer with transformers (``AutoTokenizer.from_pretrained(<the snapshot folder>)``), and ``--help``.

    python benchmarks/cold_start.py [--model Qwen/Qwen3-0.6B] [--pairs 7] [--without-torch]

The goal (issue 14) is a ratio of at most 1.0: the whole audit (interpreter, imports, Hub cache lookup, tokenizer
load, every check, the report) takes no longer than transformers needs just to load the tokenizer; ``--help``
under half a second. The machine is shared, so the two commands run in alternating pairs (ABBA order, so that
neither always runs first) and the ratio is taken of medians and as the median of per-pair ratios; wall and CPU
seconds are both recorded, with the load average around every pair. The package is byte-compiled first
(``compileall``), as an installed package is, so that neither side pays for compiling its sources.

``--without-torch`` runs both sides with torch hidden (``sys.modules["torch"] = None``, so that transformers finds
no torch), as on the default install, which does not need it; AutoTokenizer then skips its torch import.

Writes benchmarks/results/cold-start.json (cold-start-without-torch.json with ``--without-torch``).
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ENV, ROOT, machine, timed, write

_AUTOTOKENIZER = "import sys; from transformers import AutoTokenizer; AutoTokenizer.from_pretrained(sys.argv[1])"
_CLI = "import sys; from tito_audit.cli import main; sys.argv = ['tito-audit', *sys.argv[1:]]; main()"
_HIDE_TORCH = "import sys; sys.modules['torch'] = None; "
# The floor for --help: a typer app of two trivial commands, whose help typer renders with rich as it does ours.
_MINIMAL_TYPER = (
    "import typer; app = typer.Typer(add_completion=False)\n"
    "@app.command()\ndef audit(models: list[str], fmt: str = 'terminal') -> None: 'Audit.'\n"
    "@app.command()\ndef scan(folder: str) -> None: 'Scan.'\n"
    "app()"
)


def snapshot_folder(model: str) -> str:
    """The cached snapshot the audit reads, found by huggingface_hub as the audit finds it."""
    from huggingface_hub import snapshot_download

    return snapshot_download(model, cache_dir=ENV["HF_HUB_CACHE"], local_files_only=True)


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "wall_seconds_median": round(statistics.median(r["wall_seconds"] for r in runs), 3),
        "cpu_seconds_median": round(statistics.median(r["cpu_seconds"] for r in runs), 3),
        "wall_seconds": [r["wall_seconds"] for r in runs],
        "cpu_seconds": [r["cpu_seconds"] for r in runs],
    }


def _checked(result: dict[str, Any], ok: tuple[int, ...]) -> dict[str, Any]:
    if result["rc"] not in ok:
        raise SystemExit(f"{result['command']} exited {result['rc']}: {result.get('stderr_tail', '')}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--pairs", type=int, default=7, help="alternating pairs (at least 5)")
    ap.add_argument("--without-torch", action="store_true", help="hide torch from both sides (the default install)")
    args = ap.parse_args()
    prefix = _HIDE_TORCH if args.without_torch else ""
    compileall.compile_dir(str(ROOT / "tito_audit"), quiet=1)
    folder = snapshot_folder(args.model)
    audit_cmd = [sys.executable, "-c", prefix + _CLI, "audit", args.model, "-q"]  # rc 1: findings, not a failure
    reference_cmd = [sys.executable, "-c", prefix + _AUTOTOKENIZER, folder]
    help_cmd = [sys.executable, "-c", prefix + _CLI, "--help"]
    typer_cmd = [sys.executable, "-c", _MINIMAL_TYPER, "--help"]
    commands = {"audit": (audit_cmd, (0, 1)), "reference": (reference_cmd, (0,))}
    for cmd, ok in (*commands.values(), (help_cmd, (0,))):  # warm the file cache
        _checked(timed(cmd), ok)

    audits: list[dict[str, Any]] = []
    references: list[dict[str, Any]] = []
    helps: list[dict[str, Any]] = []
    typer_helps: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    for i in range(max(5, args.pairs)):
        load_before = os.getloadavg()[0]
        order = ("audit", "reference") if i % 4 in (0, 3) else ("reference", "audit")  # ABBA
        got: dict[str, dict[str, Any]] = {}
        for name in order:
            got[name] = _checked(
                timed(audit_cmd if name == "audit" else reference_cmd), (0, 1) if name == "audit" else (0,)
            )
        helps.append(_checked(timed(help_cmd), (0,)))
        typer_helps.append(_checked(timed(typer_cmd), (0,)))
        audits.append(got["audit"])
        references.append(got["reference"])
        pairs.append(
            {
                "order": list(order),
                "audit_wall": got["audit"]["wall_seconds"],
                "reference_wall": got["reference"]["wall_seconds"],
                "wall_ratio": round(got["audit"]["wall_seconds"] / got["reference"]["wall_seconds"], 3),
                "cpu_ratio": round(got["audit"]["cpu_seconds"] / got["reference"]["cpu_seconds"], 3),
                "load_1min_before": round(load_before, 2),
                "load_1min_after": round(os.getloadavg()[0], 2),
            }
        )
        print(pairs[-1], flush=True)

    audit, reference, help_ = _summary(audits), _summary(references), _summary(helps)
    results = {
        "machine": machine(),
        "command": "python benchmarks/cold_start.py " + " ".join(sys.argv[1:]),
        "model": args.model,
        "snapshot": os.path.relpath(folder, ENV["HF_HUB_CACHE"]),
        "n": len(pairs),
        "audit_command": f"python -c {prefix + _CLI!r} audit {args.model} -q",
        "reference_command": f"python -c {prefix + _AUTOTOKENIZER!r} <snapshot>",
        "audit": audit,
        "reference": reference,
        "ratio_of_medians_wall": round(audit["wall_seconds_median"] / reference["wall_seconds_median"], 3),
        "ratio_of_medians_cpu": round(audit["cpu_seconds_median"] / reference["cpu_seconds_median"], 3),
        "median_pair_ratio_wall": round(statistics.median(p["wall_ratio"] for p in pairs), 3),
        "median_pair_ratio_cpu": round(statistics.median(p["cpu_ratio"] for p in pairs), 3),
        "help": {"command": f"python -c {prefix + _CLI!r} --help", **help_},
        "help_of_a_minimal_typer_app": {"command": f"python -c {_MINIMAL_TYPER!r} --help", **_summary(typer_helps)},
        "load_average_1min": [p["load_1min_before"] for p in pairs],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "torch_installed": _installed("torch"),
        "torch_hidden": args.without_torch,
        "pairs": pairs,
    }
    print(write("cold-start-without-torch" if args.without_torch else "cold-start", results))
    print(
        f"audit {audit['wall_seconds_median']}s vs AutoTokenizer {reference['wall_seconds_median']}s: "
        f"ratio {results['ratio_of_medians_wall']} (CPU {results['ratio_of_medians_cpu']}); "
        f"--help {help_['wall_seconds_median']}s (CPU {help_['cpu_seconds_median']}s)"
    )


def _installed(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


if __name__ == "__main__":
    main()
