"""Tool-call parse rate of the format learnt from each template, over the template corpus.

For every corpus template whose control tokens a bundled tokenizer has (picked as `tito-audit scan --tokenizer
auto` picks), the format is learnt from the template (`tito_audit.rl.toolformat.learn_format`), the tool
scenarios are played with the template as the model, and R parses each sampled turn back: the parse rate is the
share of turns with calls (that the template can show) whose calls come back with the expected names.

    python benchmarks/bench_toolformat.py [--corpus DIR] [--limit N]

Writes benchmarks/results/toolformat.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tito_audit.errors import AuditError, RenderError
from tito_audit.rendering.analysis import hazards, literal_text
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl.episodes import FormatCache, canonical_episodes
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.scan import load_tokenizers
from tito_audit.scan.pick import Picker
from tito_audit.scenarios import build_scenarios
from tito_audit.sources import bundled_names
from tito_audit.sources.control_tokens import missing_tokens
from tito_audit.sources.load import compile_template

CORPUS = Path(os.environ.get("TITO_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "template-corpus"))
SCENARIOS = ("single_call/plain", "two_calls/plain", "parallel_calls/plain", "followup_user/plain")


def one(path: Path, picker: Picker, scenarios: list[Any]) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8", errors="replace")
    row: dict[str, Any] = {"template": path.stem}
    try:
        compile_template(path.name, text)
    except Exception as exc:  # classified; the benchmark goes on
        return row | {"status": "does not compile", "reason": str(exc).splitlines()[0][:120]}
    if any(h.kind == "security" for h in hazards(text)):
        return row | {"status": "security hazard (not rendered)"}
    literal = literal_text(text)
    choice = picker.choose(literal)
    model = picker.models[choice.name]
    row["tokenizer"] = choice.name
    if missing_tokens(model.tokenizer, literal):
        return row | {"status": "no tokenizer (control tokens missing from every bundled vocabulary)"}
    loaded = model.with_template(text, path.name)
    try:
        renderer = Renderer(loaded.tokenizer, loaded.chat_template)
        stops = stop_token_ids(loaded.tokenizer, renderer, loaded.generation_eos_ids)
        formats = FormatCache(stops)
        fmt = formats(renderer)
        episodes, _ = canonical_episodes(renderer, scenarios, stops, format_for=formats)
    except (RenderError, AuditError, ValueError) as exc:
        return row | {"status": "error", "reason": str(exc).splitlines()[0][:120]}
    facts = [f for e in episodes for f in e.parses if f["calls_ok"] is not None]
    row |= {
        "status": "calls parsed" if fmt.parses_calls else "template shows no tool calls",
        "format": fmt.describe()["tool_calls"],
        "turns_checked": len(facts),
        "turns_parsed": sum(bool(f["calls_ok"]) for f in facts),
    }
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    picker = Picker(load_tokenizers(bundled_names(), offline=True))
    scenarios = [s for s in build_scenarios() if s.id in SCENARIOS]
    paths = sorted(args.corpus.glob("*.jinja"))[: args.limit]
    started = time.perf_counter()
    rows = []
    for i, p in enumerate(paths):
        rows.append(one(p, picker, scenarios))
        print(f"{i + 1}/{len(paths)} {rows[-1]['template']}: {rows[-1]['status']}", file=sys.stderr)
    parsed = [r for r in rows if r.get("turns_checked")]
    checked = sum(r["turns_checked"] for r in parsed)
    ok = sum(r["turns_parsed"] for r in parsed)
    out = {
        "command": "python benchmarks/bench_toolformat.py" + (f" --limit {args.limit}" if args.limit else ""),
        "templates": len(rows),
        "status": dict(Counter(r["status"] for r in rows)),
        "templates_with_a_call_format": len(parsed),
        "turns_checked": checked,
        "turns_parsed": ok,
        "parse_rate": ok / checked if checked else None,
        "templates_all_parsed": sum(r["turns_parsed"] == r["turns_checked"] for r in parsed),
        "formats": dict(Counter(r["format"] for r in parsed).most_common(12)),
        "not_all_parsed": [r for r in parsed if r["turns_parsed"] < r["turns_checked"]][:40],
        "seconds": time.perf_counter() - started,
    }
    path = Path(__file__).parent / "results" / "toolformat.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False))
    print(json.dumps({k: v for k, v in out.items() if k != "not_all_parsed"}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
