"""Proof that a tokenizer synthesized from a template alone gives the real tokenizer's verdict.

For every model of the shared Hub cache and every bundled model, the real template is audited twice: with its
real tokenizer, and with a tokenizer synthesized from the template's own control tokens on a base chosen from the
bundled candidates with the real one hidden (every candidate that already has all of the template's control
tokens is hidden too: the scan would have used it, not synthesized). Every check runs on both sides (the
merge-dependent ones included), so that the JSON says, per check and per verdict, where the two agree.

    python benchmarks/bench_synthesized.py [--scenarios full,quick] [--limit N]

Writes benchmarks/results/synthesized-agreement.json. tests/sources/test_synthesized.py re-runs the comparison and fails
if verdict agreement drops below what is committed there.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import ENV, machine, write

os.environ.update({k: ENV[k] for k in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "TOKENIZERS_PARALLELISM")})

from tito_audit.cli.table import cached_models


def hidden_candidates(real: Any, candidates: dict[str, Any]) -> dict[str, Any]:
    """The candidates a synthesis of ``real``'s template may use: not ``real`` itself (same repo), none that
    already has all the template's control tokens (a scan would audit on that one directly)."""
    from tito_audit.rendering.analysis import literal_text
    from tito_audit.sources.control_tokens import missing_tokens

    literal = literal_text(real.chat_template)
    keep = {}
    for name, cand in candidates.items():
        same = cand.provenance.repo_id is not None and cand.provenance.repo_id == real.provenance.repo_id
        if not same and missing_tokens(cand.tokenizer, literal):
            keep[name] = cand
    return keep


def compare(real: Any, candidates: dict[str, Any], scenarios: str = "full") -> dict[str, Any]:
    """One model: the real audit and the synthesized one, every check run on both, side by side."""
    from tito_audit import audit_model
    from tito_audit.audit.checks import REGISTRY
    from tito_audit.audit.context import AuditOptions
    from tito_audit.sources import synthesized

    options = AuditOptions(scenarios=scenarios)
    hidden = hidden_candidates(real, candidates)
    synth = synthesized.Synthesizer(hidden).model(real.chat_template, real.provenance.template_file)
    measured = dict(REGISTRY)
    for cid, spec in measured.items():  # measure every check, the merge-dependent ones included
        REGISTRY[cid] = dataclasses.replace(spec, merge_dependent=None)
    try:
        t0 = time.perf_counter()
        a = audit_model(real, options)
        t1 = time.perf_counter()
        b = audit_model(synth, options)
        t2 = time.perf_counter()
    finally:
        REGISTRY.update(measured)
    real_checks = {c.id: c for c in a.checks}
    synth_checks = {c.id: c for c in b.checks}
    base = synth.provenance.tokenizer_base
    return {
        "model": real.name,
        "base": base,
        "candidates": sorted(hidden),
        "synthesized_tokens": list(synth.provenance.synthesized_tokens),
        "verdict": {"real": a.verdict, "synthesized": b.verdict, "agree": a.verdict == b.verdict},
        "checks": {cid: _side_by_side(real_checks[cid], synth_checks[cid]) for cid in sorted(real_checks)},
        "stop_tokens": {"real": a.scenarios.get("stop_tokens"), "synthesized": b.scenarios.get("stop_tokens")},
        "scenarios_played": {"real": a.scenarios.get("played"), "synthesized": b.scenarios.get("played")},
        "seconds": {"real": round(t1 - t0, 2), "synthesized": round(t2 - t1, 2)},
    }


def _outcome(check: Any) -> dict[str, Any]:
    """A check's status, the classes of its findings, and its rates (roundtrip's), rounded."""
    rates = {k: round(v, 3) for k, v in check.data.items() if k.endswith("_rate") and isinstance(v, float)}
    return {"status": check.status, "classes": sorted({f.cls for f in check.findings}), **rates}


def _side_by_side(real: Any, synth: Any) -> dict[str, Any]:
    a, b = _outcome(real), _outcome(synth)
    return {
        "real": a["status"],
        "synthesized": b["status"],
        "same_classes": a["classes"] == b["classes"],
        "real_outcome": a,
        "synthesized_outcome": b,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    checks: Counter[str] = Counter()
    agree: Counter[str] = Counter()
    classes: Counter[str] = Counter()
    for row in rows:
        for cid, pair in row["checks"].items():
            checks[cid] += 1
            agree[cid] += pair["real"] == pair["synthesized"]
            classes[cid] += pair["real"] == pair["synthesized"] and pair["same_classes"]
    return {
        "verdict_agreement": {"agree": sum(r["verdict"]["agree"] for r in rows), "of": len(rows)},
        "check_agreement": {
            cid: {"status": agree[cid], "status_and_finding_classes": classes[cid], "of": checks[cid]}
            for cid in sorted(checks)
        },
        "disagreements": [
            {"model": r["model"], "base": r["base"], "check": cid, **pair}
            for r in rows
            for cid, pair in r["checks"].items()
            if pair["real"] != pair["synthesized"] or not pair["same_classes"]
        ],
        "verdict_disagreements": [
            {"model": r["model"], "base": r["base"], **r["verdict"]} for r in rows if not r["verdict"]["agree"]
        ],
    }


def models() -> list[str]:
    """Every shared Hub model, then every bundled one (the same repos bundled: their own copy of the files)."""
    from tito_audit.sources import bundled_names

    return [*cached_models(ENV["HF_HUB_CACHE"]), *bundled_names()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default="full,quick", help="scenario sets, comma-separated")
    ap.add_argument("--limit", type=int, help="only the first N models (a smoke run of this script)")
    args = ap.parse_args()

    from tito_audit.sources import bundled_names
    from tito_audit.sources.load import load

    candidates = {name: load(name) for name in bundled_names()}
    specs = models()[: args.limit] if args.limit else models()
    results: dict[str, Any] = {
        "machine": machine(),
        "command": "python benchmarks/bench_synthesized.py " + " ".join(sys.argv[1:]),
        "candidates": sorted(candidates),
    }
    for scenarios in [s for s in args.scenarios.split(",") if s]:
        rows = []
        for spec in specs:
            real = candidates.get(spec) or load(spec)
            row = compare(real, candidates, scenarios)
            rows.append(row)
            print(
                f"{scenarios} {spec}: base {row['base']}, verdict {row['verdict']['real']} / "
                f"{row['verdict']['synthesized']}",
                flush=True,
            )
        results[scenarios] = {**summarize(rows), "models": rows}
    print(write("synthesized-agreement", results))


if __name__ == "__main__":
    main()
