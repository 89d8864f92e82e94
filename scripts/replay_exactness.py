"""Per shared model and loop: does replay report exactly the injected divergences? And the measured rate.

    python scripts/replay_exactness.py [--out benchmarks/results/replay_exactness.json]

"Exact" means the same (turn, position, class) list as the loop's recorded truth (the first divergence only for
``prefix_fallback``). A broken loop that changes nothing on a template (its truth is empty) is marked
``not_applicable`` with the reason, never counted as a pass. Per model, ``rate`` compares the sampler's injected
non-canonical rate with the rate replay measures on the correct-loop log. Needs ../shared/hf-hub beside the
checkout (the development models).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_CACHE", str(ROOT.parent / "shared" / "hf-hub"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tito_audit import load  # noqa: E402
from tito_audit.replay.analyze import ReplayContext  # noqa: E402
from tito_audit.testing.synthetic import LOOPS, log_episode, played_episodes, replay_logged  # noqa: E402

# every model of the development Hub cache, by repo id (the folder names huggingface_hub writes)
MODELS = sorted(
    p.name.removeprefix("models--").replace("--", "/") for p in Path(os.environ["HF_HUB_CACHE"]).glob("models--*")
)
RATE = 0.3
# Why a broken loop can inject nothing on a template (checked, not assumed: the row says how many it injected).
NOTHING_TO_BREAK = {
    "prefix_fallback": "the template never refuses an append: every render extends the last, the assertion holds",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "replay_exactness.json")
    args = ap.parse_args()
    rows: list[dict[str, object]] = []
    rates: list[dict[str, object]] = []
    for name in MODELS:
        model = load(name)
        ctx = ReplayContext.from_model(model)
        plays = played_episodes(model, RATE, seed=7)
        for loop in [*LOOPS, "prefix_fallback"]:
            exact = found = 0
            injected: Counter[str] = Counter()
            measured = 0
            for n, p in enumerate(plays):
                logged = log_episode(p, loop, p.scenario.id)
                got, want, res = replay_logged(logged, n + 1, ctx)
                exact += got == want
                found += len(got)
                injected.update(t.cls for t in logged.truth)
                measured += res.noncanonical_turns
            total = sum(injected.values())
            row: dict[str, object] = {
                "model": name, "loop": loop, "episodes": len(plays), "injected": total, "found": found,
                "exact_episodes": exact, "injected_by_class": dict(sorted(injected.items())),
            }  # fmt: skip
            if loop != "correct" and total == 0:
                row["status"] = "not_applicable"
                refused = sum(bool(p.refusals) for p in plays)
                why = NOTHING_TO_BREAK.get(loop, "the loop changes nothing this template renders")
                row["reason"] = f"{why} ({refused} of {len(plays)} episodes had a refused append)"
            else:
                row["status"] = "exact" if exact == len(plays) else "inexact"
            rows.append(row)
            print(json.dumps(row), flush=True)
            if loop == "correct":
                eligible = sum(sum(p.eligible) for p in plays)
                split = sum(s is not None for p in plays for s in p.splits)
                sigma = math.sqrt(RATE * (1 - RATE) / eligible) if eligible else None
                rates.append({
                    "model": name, "rate_asked": RATE, "eligible_turns": eligible, "split_turns": split,
                    "injected_rate": round(split / eligible, 4) if eligible else None,
                    "measured_noncanonical_turns": measured,
                    "measured_rate": round(measured / eligible, 4) if eligible else None,
                    "sigma": round(sigma, 4) if sigma else None,
                    "within_3_sigma": bool(sigma) and abs(split / eligible - RATE) <= 3 * (sigma or 0),
                })  # fmt: skip
    summary = {
        "command": "python scripts/replay_exactness.py",
        "models": len(MODELS),
        "rows": len(rows),
        "exact": sum(r["status"] == "exact" for r in rows),
        "inexact": sum(r["status"] == "inexact" for r in rows),
        "not_applicable": sum(r["status"] == "not_applicable" for r in rows),
    }
    args.out.write_text(json.dumps({"summary": summary, "loops": rows, "rates": rates}, indent=1) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
