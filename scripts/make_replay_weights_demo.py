"""Write what ``tito-audit replay --weights`` needs, for a demonstration: a policy, a reference and a log.

    python scripts/make_replay_weights_demo.py MODEL LOOP OUT_DIR [--episodes 16] [--rate 0.3] [--seed 0]

- ``OUT_DIR/policy``, ``OUT_DIR/ref``: Qwen3's architecture at a small width (2 layers x 64), randomly initialised
  from a transformers config (seeds 0 and 1) over MODEL's tokenizer, saved with ``save_pretrained``;
- ``OUT_DIR/log.jsonl``: the audit's scenarios played on MODEL's template (``replay.synthetic``; the sampler splits
  a token in ``rate`` of the turns), trained on by LOOP, each turn with its ``prompt_ids`` and the log-probs an
  engine running the policy in bfloat16 gives its samples (a bf16 engine beside a float32 trainer).

Then: ``tito-audit replay OUT_DIR/log.jsonl --model MODEL --weights OUT_DIR/policy --ref OUT_DIR/ref
--sampling '{"top_k": 20}'``. The policy is random: its figures show what the tool computes, not a trained model's.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen3Config

from tito_audit import load
from tito_audit.policy.model import VocabMap
from tito_audit.replay.weights.logprobs import Row, row_logps
from tito_audit.testing.synthetic import LOOPS, log_episode, played_episodes, with_engine_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("loop", choices=list(LOOPS))
    ap.add_argument("out", type=Path)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--rate", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    loaded = load(args.model)
    rows = -(-len(loaded.tokenizer) // 128) * 128  # the tokenizer's ids, padded as checkpoints pad them
    config = Qwen3Config(
        vocab_size=rows,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    models = []
    for name, seed in (("policy", 0), ("ref", 1)):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config).eval()
        model.save_pretrained(args.out / name)
        models.append(model)
    engine = copy.deepcopy(models[0]).to(torch.bfloat16)
    eps = played_episodes(loaded, args.rate, args.seed)[: args.episodes]
    spans = [p.traj.sampled_spans() for p in eps]
    lps = row_logps(engine, VocabMap.full(rows), [
        Row(p.traj.input_ids, [j for a, b in s for j in range(a, b)]) for p, s in zip(eps, spans, strict=True)
    ])  # fmt: skip
    with (args.out / "log.jsonl").open("w", encoding="utf-8") as fh:
        for p, s, lp in zip(eps, spans, lps, strict=True):
            rec = with_engine_prompts(log_episode(p, args.loop, p.scenario.id).record, p)
            it = iter(lp.tolist())
            for turn, (a, b) in zip(rec["turns"], s, strict=True):
                turn["logprobs"] = [next(it) for _ in range(a, b)]
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
