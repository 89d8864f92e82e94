"""``TitoGuardMixin``'s modes on a stand-in of the ``GRPOTrainer`` surface it uses (no TRL needed; the real trainer
runs in tests/test_trl_trainer.py): rows shuffled and split into steps as TRL 1.16's ``_prepare_inputs`` does,
``tito_on_fail="log"`` and ``"return"`` keep training and name the failing episodes, a rollout without
``tito_episode`` or with a record replay could not read stops with one line naming it.
"""

from __future__ import annotations

import logging
import random
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # the rl extra, which CI installs

from tito_audit.integrations.trl import EPISODE_FIELD, TitoGuardMixin  # noqa: E402
from tito_audit.replay import RecordError, iter_records  # noqa: E402

PAD = 0


def pad(rows: list[list[int]], left: bool) -> tuple[Any, Any]:
    width = max(map(len, rows))
    ids = [([PAD] * (width - len(r)) + r) if left else (r + [PAD] * (width - len(r))) for r in rows]
    mask = [([0] * (width - len(r)) + [1] * len(r)) if left else ([1] * len(r) + [0] * (width - len(r))) for r in rows]
    return torch.tensor(ids), torch.tensor(mask)


class StandInGRPO:
    """The parts of TRL 1.16's GRPOTrainer the mixin touches, with its batch layout and its shuffle and split."""

    def __init__(self, episodes: list[dict[str, Any]], trained: list[tuple[list[int], list[int], list[int]]]) -> None:
        self.episodes, self.trained = episodes, trained  # per row: the rollout's field; (prompt, completion, env_mask)
        self.model = SimpleNamespace(training=True)
        self.state = SimpleNamespace(global_step=0)
        self.accelerator = SimpleNamespace(process_index=0)
        self.processing_class = None
        self.losses = 0

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        for row, episode in zip(inputs, self.episodes, strict=True):  # TRL merges extra rollout fields into rows
            if episode is not None:
                row[EPISODE_FIELD] = episode
        prompt_ids, prompt_mask = pad([p for p, _, _ in self.trained], left=True)
        completion_ids, completion_mask = pad([c for _, c, _ in self.trained], left=False)
        tool_mask, _ = pad([m for _, _, m in self.trained], left=False)
        return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                "completion_mask": completion_mask, "tool_mask": tool_mask}  # fmt: skip

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, **kw: Any) -> float:
        self.losses += 1
        return 0.0

    def train(self) -> None:
        batch = self._generate_and_score_completions([{} for _ in self.episodes])
        order = list(range(len(self.episodes)))
        random.Random(0).shuffle(order)  # shuffle_sequence_dict, then split_tensor_dict into two steps
        batch = {k: v[order] if hasattr(v, "shape") else [v[i] for i in order] for k, v in batch.items()}
        half = len(order) // 2
        for step in (slice(0, half), slice(half, None)):
            self.compute_loss(self.model, {k: v[step] for k, v in batch.items()})


class Guarded(TitoGuardMixin, StandInGRPO):
    pass


def episodes(broken: set[int]) -> tuple[list[dict[str, Any]], list[tuple[list[int], list[int], list[int]]]]:
    """Four two-turn episodes; in ``broken`` ones the trainer trains the second turn re-encoded (ids 7, 8 -> 78)."""
    eps, trained = [], []
    for k in range(4):
        prompt, t1, delta, t2 = [1, 2, 3 + k], [5, 6, 9], [4, 4], [7, 8, 9]
        eps.append({"id": f"ep{k}", "turns": [{"ids": t1}, {"ids": t2}]})
        second = [78, 9] if k in broken else t2
        trained.append((prompt, t1 + delta + second, [1] * 3 + [0] * 2 + [1] * len(second)))
    return eps, trained


def test_log_mode_warns_per_failing_episode_and_keeps_training(tmp_path, caplog):
    eps, trained = episodes(broken={1, 2})
    trainer = Guarded(eps, trained, tito_log=tmp_path / "log.jsonl", tito_on_fail="log")
    with caplog.at_level(logging.WARNING, logger="tito_audit.guard"):
        trainer.train()
    assert trainer.losses == 2 and trainer.tito_checked == 4
    assert sorted(eid for eid, _ in trainer.tito_failures) == ["ep1", "ep2"]  # through the shuffle, row by row
    assert all(f.divergence.turn == 1 and f.divergence.index == 8 for _, f in trainer.tito_failures)
    assert sorted(r.getMessage().split(":")[1].strip() for r in caplog.records) == ["ep1", "ep2"]
    records = [r for _, r in iter_records(tmp_path / "log.jsonl")]
    assert [r["id"] for r in records] == ["ep0", "ep1", "ep2", "ep3"]  # written in rollout order, before the loss
    assert records[1]["input_ids"][-2:] == [78, 9] and records[1]["loss_mask"] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_return_mode_is_silent_and_raise_mode_stops_before_the_loss(tmp_path, caplog):
    eps, trained = episodes(broken={3})
    quiet = Guarded(eps, trained, tito_on_fail="return")
    with caplog.at_level(logging.WARNING, logger="tito_audit.guard"):
        quiet.train()
    assert quiet.losses == 2 and [eid for eid, _ in quiet.tito_failures] == ["ep3"] and not caplog.records
    strict = Guarded(*episodes(broken={3}))
    with pytest.raises(AssertionError, match="1 of 2 episode"):  # TitoGuardError is an AssertionError
        strict.train()
    assert strict.tito_checked == 2 * (strict.losses + 1)  # the failing step was checked; its loss never ran


def test_a_rollout_without_the_field_or_with_a_bad_record_stops_with_one_line(tmp_path):
    eps, trained = episodes(broken=set())
    missing = Guarded([None, *eps[1:]], trained)
    with pytest.raises(ValueError, match=r"1 of 4 rollout\(s\) carry no 'tito_episode': return it from rollout_func"):
        missing.train()
    eps[2]["messages"] = [{"role": "user", "content": "hi"}]  # 0 assistant messages for 2 sampled turns
    bad = Guarded(eps, trained, tito_log=tmp_path / "bad.jsonl")
    with pytest.raises(RecordError, match="episode ep2: 0 assistant message"):
        bad.train()
