"""Measure ``tito-audit fix`` on a template corpus: how many with a failing ``tool_append_prefix`` get a proven fix.

Each template is audited against the tokenizer ``tito-audit scan --tokenizer auto`` would pick (the bundled models
by default, ``tito_audit.scan.pick``); statically unsafe templates and templates whose control tokens the picked
vocabulary lacks are skipped, as the scan classifies them. Every template whose audit fails ``tool_append_prefix``
goes through ``propose_fix``. One JSON line per audited template goes to ``--jsonl`` (re-running resumes from it),
a summary to stdout and ``--json``.

    python scripts/fix_corpus.py /work/shared/template-corpus --jsonl /tmp/fix_corpus.jsonl --json /tmp/fix_corpus.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any


def _audit_one(text: str, name: str, model: Any) -> dict[str, Any]:
    from tito_audit.audit import audit_model
    from tito_audit.fix import propose_fix
    from tito_audit.scan.hazards import hazards, literal_text
    from tito_audit.scan.pick import missing_tokens
    from tito_audit.sources.load import compile_template

    row: dict[str, Any] = {"template": name, "tokenizer": model.name}
    if any(h.kind == "security" for h in hazards(text)):
        return {**row, "skipped": "statically unsafe template (not rendered)"}
    missing = missing_tokens(model.tokenizer, literal_text(text))
    if missing:  # the scan's missing_tokens class: no bundled vocabulary has its control tokens
        return {**row, "skipped": f"vocabulary lacks {', '.join(missing[:4])}"}
    try:
        compile_template(name, text)
    except Exception as exc:
        return {**row, "skipped": f"does not compile: {str(exc)[:120]}"}
    patched_model = model.with_template(text, name)
    report = audit_model(patched_model)
    row["verdict"] = report.verdict
    if report.error:
        return {**row, "skipped": f"audit error: {report.error[:160]}"}
    append = report.check("tool_append_prefix")
    row["tool_append_prefix"] = append.status
    row["finding_classes"] = sorted({f.cls for f in append.active_findings})
    if append.status != "fail":
        return row
    started = time.perf_counter()
    try:
        result = propose_fix(patched_model, report=report)
    except Exception as exc:  # a fixer bug must not stop the measurement; it is counted
        return {**row, "fix_status": "crash", "fix_message": f"{type(exc).__name__}: {exc}"[:300]}
    proof = result.proof
    row.update(
        fix_status=result.status,
        fix_message=result.message[:300],
        fix_seconds=round(time.perf_counter() - started, 2),
        verdict_after=result.after.verdict if result.after else None,
        offered=[p.id for p in result.offered],
        rejected={r.patch.id: r.reasons[:2] for r in result.rejected},
        not_applicable={s.id: s.reason for s in result.skipped},
        equivalence=(
            {
                "compared": proof.equivalence.compared,
                "identical": proof.equivalence.identical,
                "later_compared": proof.equivalence.later_compared,
                "later_identical": proof.equivalence.later_identical,
            }
            if proof
            else None
        ),
        flagged=proof.flagged if proof else [],
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", help="folder of .jinja templates")
    parser.add_argument("--candidate", action="append", default=[], help="candidate tokenizer (default: bundled)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--jsonl", type=Path, default=None, help="per-template rows (resumable)")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    args = parser.parse_args(argv)

    from tito_audit.scan import discover, load_tokenizers
    from tito_audit.scan.discover import read_template
    from tito_audit.scan.hazards import literal_text
    from tito_audit.scan.pick import Picker
    from tito_audit.sources import bundled_names

    templates = discover(args.corpus)[: args.limit]
    models = load_tokenizers(args.candidate or bundled_names(), offline=True)
    picker = Picker(models)  # what ``tito-audit scan --tokenizer auto`` picks for each template
    done: dict[str, dict[str, Any]] = {}
    if args.jsonl and args.jsonl.exists():
        for line in args.jsonl.read_text().splitlines():
            row = json.loads(line)
            done[row["template"]] = row
    out = args.jsonl.open("a") if args.jsonl else None
    started = time.perf_counter()
    for n, template in enumerate(templates, 1):
        if template.name in done:
            continue
        try:
            text = read_template(template.path)
        except (OSError, ValueError) as exc:
            row = {"template": template.name, "tokenizer": None, "skipped": f"unreadable: {exc}"}
        else:
            row = _audit_one(text, template.name, models[picker.choose(literal_text(text)).name])
        done[row["template"]] = row
        if out:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
        if row.get("fix_status"):
            status = f"{row['fix_status']} {row.get('offered')}"
            print(f"[{n}/{len(templates)}] {row['template']}: {status}", file=sys.stderr)
    summary = summarise(list(done.values()))
    summary["seconds_this_run"] = round(time.perf_counter() - started, 1)
    text = json.dumps(summary, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    return 0


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    failing = [r for r in rows if r.get("tool_append_prefix") == "fail"]
    proven = [r for r in failing if r.get("fix_status") == "proven"]
    reasons: collections.Counter[str] = collections.Counter()
    for r in failing:  # why the history rewrite (the patch the verdict depends on) was not offered
        if r.get("fix_status") == "proven":
            continue
        rejected = (r.get("rejected") or {}).get("reasoning_history")
        skipped = (r.get("not_applicable") or {}).get("reasoning_history")
        if rejected:
            reasons["reasoning_history rejected by its proof: " + rejected[0].split(" (")[0]] += 1
        elif skipped:
            reasons["reasoning_history n/a: " + skipped.split(" (")[0]] += 1
        else:
            reasons[(r.get("fix_message") or r.get("fix_status") or "?").split(":")[0]] += 1
    return {
        "templates": len(rows),
        "audited": sum(1 for r in rows if "verdict" in r and not r.get("skipped")),
        "skipped": dict(collections.Counter(r["skipped"].split(":")[0] for r in rows if r.get("skipped"))),
        "verdicts": dict(collections.Counter(r["verdict"] for r in rows if "verdict" in r)),
        "tool_append_prefix_fail": len(failing),
        "fail_by_tokenizer": dict(collections.Counter(r["tokenizer"] for r in failing)),
        "proven_fix": len(proven),
        "proven_fix_not_unsafe_after": sum(1 for r in proven if r.get("verdict_after") != "unsafe"),
        "proven_by_patch_set": dict(collections.Counter("+".join(r["offered"]) for r in proven)),
        "flagged_inference_changes": sum(1 for r in proven if r.get("flagged")),
        "not_fixed_reasons": dict(reasons.most_common()),
        "equivalence_conversations": sum((r.get("equivalence") or {}).get("compared", 0) for r in proven),
        "equivalence_identical": sum((r.get("equivalence") or {}).get("identical", 0) for r in proven),
    }


if __name__ == "__main__":
    raise SystemExit(main())
