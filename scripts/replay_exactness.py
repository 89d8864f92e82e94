"""Per shared model and loop: in how many episodes replay reports exactly the injected divergences.

    python scripts/replay_exactness.py [--out benchmarks/results/replay_exactness.json]

"Exact" means the same (turn, position, class) list as the loop's recorded truth (the first divergence only for
``prefix_fallback``). Needs ../shared/hf-hub beside the checkout (the development models).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_CACHE", str(ROOT.parent / "shared" / "hf-hub"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tito_audit import load  # noqa: E402
from tito_audit.replay.analyze import ReplayContext, analyze  # noqa: E402
from tito_audit.replay.schema import episode_from_native  # noqa: E402
from tito_audit.replay.synthetic import LOOPS, log_episode, played_episodes  # noqa: E402

# every model of the development Hub cache, by repo id (the folder names huggingface_hub writes)
MODELS = sorted(
    p.name.removeprefix("models--").replace("--", "/") for p in Path(os.environ["HF_HUB_CACHE"]).glob("models--*")
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "replay_exactness.json")
    args = ap.parse_args()
    rows = []
    for name in MODELS:
        model = load(name)
        ctx = ReplayContext.from_model(model)
        plays = played_episodes(model, 0.3, seed=7)
        for loop in [*LOOPS, "prefix_fallback"]:
            exact = injected = flagged_right = first_right = 0
            for n, p in enumerate(plays):
                logged = log_episode(p, loop, p.scenario.id)
                res = analyze(episode_from_native(logged.record, n + 1), ctx)
                got = [(d.turn, d.index, d.cls) for d in res.divergences]
                want = [(t.turn, t.index, t.cls) for t in logged.truth]
                if logged.first_only:
                    got = got[:1]
                exact += got == want
                injected += len(want)
                flagged_right += bool(got) == bool(want)
                first_right += (not want and not got) or (bool(want) and bool(got) and got[0][1] == want[0][1])
            row = {"model": name, "loop": loop, "episodes": len(plays), "exact": exact, "injected": injected,
                   "flagged_right": flagged_right, "first_position_right": first_right}  # fmt: skip
            rows.append(row)
            print(json.dumps(row))
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
