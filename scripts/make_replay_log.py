"""Write a rollout log of the audit's scenarios played through ``Trajectory`` by a correct or a broken loop.

    python scripts/make_replay_log.py MODEL LOOP OUT.jsonl [--rate 0.3] [--seed 0]

LOOP is one of ``tito_audit.testing.synthetic.LOOPS`` or ``prefix_fallback``. The sampler splits a token in
``rate`` of the turns. Prints the injected truth (divergences per class) on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from tito_audit import load
from tito_audit.testing.synthetic import LOOPS, log_episode, played_episodes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("loop", choices=[*LOOPS, "prefix_fallback"])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rate", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    truth: Counter[str] = Counter()
    with args.out.open("w", encoding="utf-8") as fh:
        for p in played_episodes(load(args.model), args.rate, args.seed):
            logged = log_episode(p, args.loop, p.scenario.id)
            truth.update(t.cls for t in logged.truth)
            fh.write(json.dumps(logged.record) + "\n")
    print(f"injected: {dict(truth) or 'nothing'}", file=sys.stderr)


if __name__ == "__main__":
    main()
