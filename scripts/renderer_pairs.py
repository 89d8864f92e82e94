"""Engine/trainer renderer pairs on the bundled and shared models: the numbers docs/renderers.md quotes.

    PYTHONPATH=. HF_HUB_CACHE=../shared/hf-hub HF_HUB_OFFLINE=1 python scripts/renderer_pairs.py

Writes docs/renderer-pairs.json: per pair, the scenarios compared, agreeing and diverging (and of those, how many
the engine's own re-render parts from at the same token), the scenarios not compared with why, and the distinct
first divergences (engine token, trainer token, where).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from tito_audit.audit.context import AuditOptions
from tito_audit.audit.parallel import audit_models as audit

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "renderer-pairs.json"
PAIRS = [
    ("gpt-oss-20b", "openai-harmony", "jinja", {}),
    ("gpt-oss-20b", "renderers@gpt-oss", "openai-harmony", {}),
    ("mistral-nemo-instruct-2407", "mistral-common", "jinja", {}),
    ("qwen3-0.6b", "renderers", "jinja", {}),
    ("qwen3-0.6b", "jinja", "jinja", {}),
    ("deepseek-v3", "renderers", "jinja", {}),
    ("meta-llama/Llama-3.2-3B-Instruct", "renderers@llama-3", "jinja", {}),
    ("meta-llama/Llama-3.2-3B-Instruct", "renderers@llama-3", "jinja", {"date_string": "26 Jul 2024"}),
]


def main() -> int:
    rows = []
    for model, engine, trainer, kwargs in PAIRS:
        options = AuditOptions(renderer=engine, train_renderer=trainer, template_kwargs=kwargs)
        (report,) = audit([model], options, offline=True).models
        row: dict[str, object] = {
            "model": model,
            "engine": engine,
            "trainer": trainer,
            "template_kwargs": kwargs,
            "verdict": report.verdict,
        }
        if report.error:
            row["error"] = report.error
        else:
            check = report.check("renderer_pair")
            data = check.data
            firsts = Counter(
                (d["in"], d["engine_token"], d["trainer_token"], d["engine_rerender_too"])
                for d in data["first_divergences"]
            )
            row.update(
                {
                    "status": check.status,
                    "summary": check.summary,
                    "renderers": report.renderers,
                    **{k: data[k] for k in ("scenarios_compared", "scenarios_agree", "scenarios_diverge")},
                    "scenarios_diverge_engine_too": data["scenarios_diverge_engine_too"],
                    "turns_compared": data["turns_compared"],
                    "not_compared": data["not_compared"],
                    "first_divergences": [
                        {"in": w, "engine_token": e, "trainer_token": t, "engine_rerender_too": own, "scenarios": n}
                        for (w, e, t, own), n in firsts.most_common()
                    ],
                }
            )
        rows.append(row)
        print(f"{model} {engine} vs {trainer} {kwargs or ''}: {row.get('summary') or row.get('error')}")
    OUT.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
