"""The run-time TITO guard in a plain PyTorch-style training loop: check every batch before the loss.

Rollouts are kept in ``tito_audit.Trajectory`` token buffers (the audit's scenarios, played with the bundled
``qwen2.5-7b-instruct`` tokenizer and template; runs offline). Each batch goes to ``check_batch`` as padded
tensors (``input_ids``, ``loss_mask``, ``attention_mask``) plus, per turn, the ids the engine sampled and the
prompt ids it was given. The correct loop passes; a loop that decodes and re-encodes what it sampled (naive
re-tokenization) trains on ids the policy never sampled wherever the sampler emitted a non-canonical split, and
the guard raises with the first divergence. No template is rendered by the guard: slice comparisons per turn.

    python examples/guard_training_loop.py [MODEL]
"""

from __future__ import annotations

import sys
import time

from tito_audit import TitoGuardError, check_batch, load
from tito_audit.testing.synthetic import log_episode, played_episodes


def engine_contexts(played) -> list[list[int]]:
    """Per turn, the prompt ids the engine was given: the token buffer before the turn (a turn streamed in chunks
    is one turn)."""
    spans = played.traj.sampled_spans()
    ends = {b for _, b in spans}
    return [list(played.traj.input_ids[:a]) for a, _ in spans if a not in ends]


def padded(rows: list[dict], pad_id: int, contexts: list[list[list[int]]]) -> dict:
    """Right-padded tensors as a collator would make them (torch if installed, else lists)."""
    width = max(len(r["input_ids"]) for r in rows)

    def pad(xs: list[int], fill: int) -> list[int]:
        return xs + [fill] * (width - len(xs))

    batch = {
        "input_ids": [pad(r["input_ids"], pad_id) for r in rows],
        "loss_mask": [pad(r["loss_mask"], 0) for r in rows],
        "attention_mask": [pad([1] * len(r["input_ids"]), 0) for r in rows],
        "sampled": [  # kept by the rollout code, per turn: what the engine returned, and what it was given
            [{"ids": t["ids"], "prompt_ids": c} for t, c in zip(r["turns"], ctx, strict=True)]
            for r, ctx in zip(rows, contexts, strict=True)
        ],
    }
    try:
        import torch

        for key in ("input_ids", "loss_mask", "attention_mask"):
            batch[key] = torch.tensor(batch[key])
    except ImportError:
        pass
    return batch


def main(model_name: str) -> None:
    model = load(model_name)
    episodes = played_episodes(model, rate=0.3, seed=0)  # the sampler splits a token in ~30% of turns
    pad_id = model.tokenizer.pad_token_id or 0
    stop_ids = episodes[0].traj.stop_ids  # what the engine stops a turn on: the turn's ids after it are checked too
    for loop in ("correct", "naive_retokenize"):
        print(f"-- {loop} loop")
        for step in range(2):
            played = episodes[step * 8 : step * 8 + 8]
            rows = [log_episode(p, loop, p.scenario.id).record for p in played]
            batch = padded(rows, pad_id, [engine_contexts(p) for p in played])
            started = time.perf_counter()
            try:
                result = check_batch(batch, stop_ids=stop_ids)  # raises TitoGuardError on the first diverging episode
            except TitoGuardError as exc:
                print(f"step {step}: {exc}")
                break
            assert result.complete, result.not_checked  # ids, mask, stops and every turn's context: all compared
            print(f"step {step}: {result.episodes} episodes trained exactly as sampled, after the context each turn "
                  f"was sampled on ({1000 * (time.perf_counter() - started):.2f} ms)")  # fmt: skip
            # ... loss = policy_loss(model(batch["input_ids"]), batch["loss_mask"]); loss.backward() ...
    # With a tokenizer, a failure is named by class (decodes a few ids; still no render):
    rows = [log_episode(p, "naive_retokenize", p.scenario.id).record for p in episodes[:16]]
    contexts = [engine_contexts(p) for p in episodes[:16]]
    result = check_batch(padded(rows, pad_id, contexts), tokenizer=model.tokenizer, on_fail="return")
    print(f"{len(result.failures)} of {result.episodes} episodes diverge; first: {result.first}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-7b-instruct")
