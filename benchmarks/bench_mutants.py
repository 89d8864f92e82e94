"""The mutation study of issue 40: templates the audit calls SAFE, rewritten by generic history-only mutation
operators, audited again. Every effective history mutant must not be SAFE; every control must stay SAFE.

    python benchmarks/bench_mutants.py [--search 40] [--seed 0] [--name mutants]

The operators and the oracle that says whether a mutant is effective (whether any conversation can tell it from
the original) are the tests' (``tests/audit/search/mutants.py``). The templates: the tests' plain tool template
that keeps reasoning on every turn (no SAFE template of the corpus renders reasoning, so the reasoning operators
need one), the bundled Qwen2.5-7B-Instruct, the shared Llama-3.2-3B-Instruct, and SAFE templates of the corpus on
a real tokenizer (the one the corpus scan picks for them), of several families and tool-call formats. Each mutant
is audited as ``tito-audit audit MODEL --chat-template MUTANT`` would (the default options: every scenario, the
search at its default budget and seed). Writes benchmarks/results/NAME.json: per operator the effective mutants,
how many the audit did not call SAFE (the detection rate), and every mutant with its verdict and reasons.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import ROOT, SHARED, machine, write

from tests.audit.search.mutants import OPERATORS, effective

CORPUS = SHARED / "template-corpus"
# (name, tokenizer, template file or None for the model's own)
TEMPLATES: tuple[tuple[str, str, Path | None], ...] = (
    # the tests' plain ChatML tool template that keeps reasoning on every turn (the corpus' SAFE ones show none)
    ("tests/data/search/base.jinja", "qwen3-0.6b", ROOT / "tests" / "data" / "search" / "base.jinja"),
    ("qwen2.5-7b-instruct (bundled)", "qwen2.5-7b-instruct", None),
    ("Llama-3.2-3B-Instruct (shared)", "meta-llama/Llama-3.2-3B-Instruct", None),
    *(
        (name, tokenizer, CORPUS / f"{name}.jinja")
        for name, tokenizer in (
            ("Qwen-Qwen3-4B-Instruct-2507", "qwen3-0.6b"),
            ("Qwen-Qwen3-Coder-30B-A3B-Instruct", "qwen3-0.6b"),
            ("NousResearch-Hermes-4-14B", "qwen3-0.6b"),
            ("Salesforce-xLAM-2-32b-fc-r", "olmo-2-1124-7b-instruct"),
            ("ai21labs-AI21-Jamba2-3B", "qwen3-0.6b"),
            ("WeiboAI-VibeThinker-1.5B", "qwen3-0.6b"),
            ("MiMo-VL", "qwen3-0.6b"),
            ("dphn-Dolphin3.0-R1-Mistral-24B", "qwen3-0.6b"),
        )
    ),
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--search", type=int, default=None, help="the search's budget (default: audit's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="mutants")
    args = ap.parse_args()

    from tito_audit import audit_model, load
    from tito_audit.audit.context import SEARCH_BUDGET, AuditOptions

    options = AuditOptions(search=SEARCH_BUDGET if args.search is None else args.search, search_seed=args.seed)
    mutants: list[dict[str, Any]] = []
    originals: list[dict[str, Any]] = []
    for name, tokenizer, path in TEMPLATES:
        model = load(tokenizer, chat_template_file=str(path)) if path else load(tokenizer)
        original = audit_model(model, options)
        originals.append({"template": name, "tokenizer": tokenizer, "verdict": original.verdict})
        if original.verdict != "safe":
            print(f"{name}: {original.verdict}, not a SAFE template: left out", flush=True)
            continue
        for op in OPERATORS:
            text = op.apply(model.chat_template)
            started = time.process_time()
            report = audit_model(model.with_template(text, f"mutant {op.name}"), options)
            found = (report.scenarios.get("search") or {}).get("counterexamples", [])
            row = {
                "template": name,
                "operator": op.name,
                "kind": op.kind,
                "effective": effective(model, text),
                "verdict": report.verdict,
                "error": report.error,
                "reasons": report.verdict_reasons,
                "counterexamples": [c["scenario"] for c in found],
                "cpu_seconds": round(time.process_time() - started, 2),
            }
            mutants.append(row)
            print(f"{name} {op.name}: effective={row['effective']} {row['verdict']}", flush=True)
    per_operator: dict[str, Any] = {}
    for op in OPERATORS:
        rows = [m for m in mutants if m["operator"] == op.name]
        if op.kind == "history":
            eff = [m for m in rows if m["effective"]]
            caught = [m for m in eff if m["verdict"] not in ("safe",)]
            per_operator[op.name] = {
                "kind": op.kind,
                "what": op.what,
                "mutants": len(rows),
                "effective": len(eff),
                "not_safe": len(caught),
                "detection_rate": round(len(caught) / len(eff), 3) if eff else None,
                "missed": [m["template"] for m in eff if m not in caught],
            }
        else:
            red = [m for m in rows if m["verdict"] != "safe"]
            per_operator[op.name] = {
                "kind": op.kind,
                "what": op.what,
                "mutants": len(rows),
                "not_safe": len(red),
                "false_red_rate": round(len(red) / len(rows), 3) if rows else None,
                "false_reds": [{"template": m["template"], "verdict": m["verdict"]} for m in red],
            }
    history = [m for m in mutants if m["kind"] == "history" and m["effective"]]
    caught = sum(m["verdict"] != "safe" for m in history)
    controls = [m for m in mutants if m["kind"] == "control"]
    results = {
        "machine": machine(),
        "command": "python benchmarks/bench_mutants.py " + " ".join(sys.argv[1:]),
        "search": {"budget": options.search, "seed": options.search_seed},
        "templates": originals,
        "summary": {
            "effective_history_mutants": len(history),
            "not_safe": caught,
            "detection_rate": round(caught / len(history), 3) if history else None,
            "controls": len(controls),
            "controls_not_safe": sum(m["verdict"] != "safe" for m in controls),
        },
        "per_operator": per_operator,
        "mutants": mutants,
    }
    print(results["summary"])
    print(write(args.name, results))


if __name__ == "__main__":
    main()
