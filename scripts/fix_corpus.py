"""Measure ``tito-audit fix`` on a template corpus: how many with a failing ``tool_append_prefix`` get a proven fix.

Each template goes through the scan's own ``audit_auto`` (the tokenizer ``tito-audit scan --tokenizer auto`` picks,
the bundled models by default): templates the scan classifies without a verdict are skipped with that class, and
every ``unsafe`` one (a failing ``tool_append_prefix``) goes through ``propose_fix``. One JSON line per template
goes to ``--jsonl`` (re-running resumes from it), a summary to stdout and ``--json``.

    python scripts/fix_corpus.py ../shared/template-corpus --jsonl /tmp/fix_corpus.jsonl --json /tmp/fix_corpus.json
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path
from typing import Any


def _audit_one(template: Any, picker: Any) -> dict[str, Any]:
    """The scan's own result for the template (pick, compile, hazards, vocabulary, audit), then the fix if unsafe."""
    from tito_audit.fix import propose_fix
    from tito_audit.scan.discover import read_template
    from tito_audit.scan.template_audit import audit_auto

    scanned = audit_auto(template, picker)
    row: dict[str, Any] = {"template": template.name, "tokenizer": scanned.tokenizer}
    if scanned.verdict is None:  # classified without a verdict, exactly as `tito-audit scan` counts it
        return {**row, "skipped": f"{scanned.cls}: {scanned.reason}"}
    row["verdict"] = scanned.verdict
    if scanned.verdict != "unsafe":  # unsafe is exactly a failing tool_append_prefix (tito_audit.report.verdict)
        return {**row, "tool_append_prefix": "pass"}
    started = time.perf_counter()
    model = picker.models[scanned.tokenizer].with_template(read_template(template.path), template.name)
    try:
        result = propose_fix(model)
    except Exception as exc:  # a fixer bug must not stop the measurement; it is counted
        return {**row, "fix_status": "crash", "fix_message": f"{type(exc).__name__}: {exc}"[:300]}
    append = result.before.check("tool_append_prefix")
    row["tool_append_prefix"] = append.status
    row["finding_classes"] = sorted({f.cls for f in append.active_findings})
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
        row = _audit_one(template, picker)
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
