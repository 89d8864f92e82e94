"""``TitoGuardMixin``'s modes on a stand-in of the ``GRPOTrainer`` surface it uses (no TRL needed; the real trainer
runs in tests/trainer/test_trl_trainer.py): rows shuffled and split into steps as TRL 1.16's ``_prepare_inputs`` does,
``tito_on_fail="log"`` and ``"return"`` keep training and name the failing episodes, a rollout without
``tito_episode`` or with a record replay could not read stops with one line naming it; each turn's ``prompt_ids``
reach the guard (a dropped tool result is caught), TRL's flattened log-probs are compared with the turns', rows
``mask_truncated_completions`` zeroes are intended (counted, not failed, not logged), and each rank gets its log.
"""

from __future__ import annotations

import logging
import random
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # the rl extra, which CI installs

from tito_audit.replay import RecordError, iter_records  # noqa: E402
from tito_audit.trainer.trl import EPISODE_FIELD, TitoGuardMixin  # noqa: E402

PAD = 0


def pad(rows: list[list[int]], left: bool) -> tuple[Any, Any]:
    width = max(map(len, rows))
    ids = [([PAD] * (width - len(r)) + r) if left else (r + [PAD] * (width - len(r))) for r in rows]
    mask = [([0] * (width - len(r)) + [1] * len(r)) if left else ([1] * len(r) + [0] * (width - len(r))) for r in rows]
    return torch.tensor(ids), torch.tensor(mask)


class StandInGRPO:
    """The parts of TRL 1.16's GRPOTrainer the mixin touches, with its batch layout and its shuffle and split."""

    def __init__(
        self,
        episodes: list[dict[str, Any]],
        trained: list[tuple[list[int], list[int], list[int]]],
        logprobs: list[list[float]] | None = None,  # the rollout's flattened logprobs, per completion position
        truncated: set[int] = frozenset(),  # rows whose completion does not end in EOS
        mask_truncated_completions: bool = False,
        rank: tuple[int, int] = (0, 1),
    ) -> None:
        self.episodes, self.trained = episodes, trained  # per row: the rollout's field; (prompt, completion, env_mask)
        self.flat_logprobs, self.truncated = logprobs, truncated
        self.mask_truncated_completions = mask_truncated_completions
        self.model = SimpleNamespace(training=True)
        self.state = SimpleNamespace(global_step=0)
        self.accelerator = SimpleNamespace(process_index=rank[0], num_processes=rank[1])
        self.processing_class = None
        self.losses = 0

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        for row, episode in zip(inputs, self.episodes, strict=True):  # TRL merges extra rollout fields into rows
            if episode is not None:
                row[EPISODE_FIELD] = episode
        prompt_ids, prompt_mask = pad([p for p, _, _ in self.trained], left=True)
        completion_ids, completion_mask = pad([c for _, c, _ in self.trained], left=False)
        tool_mask, _ = pad([m for _, _, m in self.trained], left=False)
        if self.mask_truncated_completions:  # as TRL 1.16 does: every mask of a truncated row zeroed
            keep = torch.tensor([[0] if n in self.truncated else [1] for n in range(len(self.trained))])
            completion_mask, tool_mask = completion_mask * keep, tool_mask * keep
        batch = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                 "completion_mask": completion_mask, "tool_mask": tool_mask}  # fmt: skip
        if self.flat_logprobs is not None:
            width = completion_ids.shape[1]
            batch["sampling_per_token_logps"] = torch.tensor(
                [lp + [0.0] * (width - len(lp)) for lp in self.flat_logprobs]
            )
        return batch

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
    failing = [r.getMessage() for r in caplog.records if "episode" in r.getMessage()]
    assert sorted(m.split(":")[1].strip() for m in failing) == ["ep1", "ep2"]
    notes = [r.getMessage() for r in caplog.records if "not checked" in r.getMessage()]
    assert len(notes) == 2  # each said once: no processing class gives no stop ids, the turns no prompt_ids
    assert "ids after the stop not checked on 4 turn(s)" in notes[0]
    assert "context not checked on 4 of 4 turn(s): no prompt_ids" in notes[1]
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
    with pytest.raises(RecordError, match=r"TitoGuardMixin: .*bad.jsonl: episode \d+ \(id 'ep2'\): 0 assistant"):
        bad.train()


# -- what the engine was given, TRL's flattened log-probs, truncated completions, ranks (red-team r3/r11, TRL gap)


def with_turn_context(eps: list[dict[str, Any]], trained: list[tuple[list[int], list[int], list[int]]]) -> None:
    """Each turn's prompt_ids as a TITO engine is given them: the prompt, then turn 1 and the tool suffix [4, 4]."""
    for ep, (prompt, _, _) in zip(eps, trained, strict=True):
        first, second = ep["turns"]
        first["prompt_ids"] = prompt
        second["prompt_ids"] = prompt + first["ids"] + [4, 4]


def test_the_guard_sees_a_tool_result_the_trainer_dropped_through_the_rollouts_prompt_ids(tmp_path):
    eps, trained = episodes(broken=set())
    with_turn_context(eps, trained)
    prompt, completion, env = trained[2]
    trained[2] = (prompt, completion[:3] + completion[5:], env[:3] + env[5:])  # the tool suffix dropped
    strict = Guarded(eps, trained, tito_log=tmp_path / "log.jsonl")
    with pytest.raises(AssertionError, match="turn 1 was sampled on another context") as caught:
        strict.train()
    assert [eid for eid, _ in strict.tito_failures] == ["ep2"] and strict.losses == 0
    (_, failure), d = strict.tito_failures[0], strict.tito_failures[0][1].divergence
    assert (d.turn, d.index, failure.context_mismatches) == (1, 6, 1)  # where the suffix should have been
    assert "[4, 4]" in d.message and "episode ids: ep2" in "".join(caught.value.__notes__)
    records = [r for _, r in iter_records(tmp_path / "log.jsonl")]
    assert records[0]["turns"][1]["prompt_ids"] == [1, 2, 3, 5, 6, 9, 4, 4]  # logged for replay as well


def test_trls_flattened_logprobs_must_be_the_turns_own(tmp_path):
    eps, trained = episodes(broken=set())
    for k, ep in enumerate(eps):
        ep["turns"][0]["logprobs"] = [-0.5 - k, -1.0, -0.25]
        ep["turns"][1]["logprobs"] = [-2.0, -0.125, -0.75]
    aligned = [ep["turns"][0]["logprobs"] + [0.0, 0.0] + ep["turns"][1]["logprobs"] for ep in eps]
    fine = Guarded(eps, trained, logprobs=aligned)
    fine.train()
    assert fine.losses == 2 and fine.tito_failures == [] and fine.tito_logprobs_checked == 4
    # ep1's rollout forgot the tool suffix's placeholders: its turn-2 log-probs land two positions early
    shifted = [list(lp) for lp in aligned]
    shifted[1] = eps[1]["turns"][0]["logprobs"] + eps[1]["turns"][1]["logprobs"] + [0.0, 0.0]
    wrong = Guarded(eps, trained, logprobs=shifted, tito_on_fail="return")
    wrong.train()
    ((eid, failure),) = wrong.tito_failures
    assert eid == "ep1" and failure.divergence.kind == "logprobs" and failure.divergence.turn == 1
    assert failure.divergence.index == 8 and "sampling_per_token_logps" in failure.divergence.message


def test_truncated_completions_masked_by_trl_are_intended_not_divergent(tmp_path, caplog):
    eps, trained = episodes(broken=set())
    trainer = Guarded(eps, trained, truncated={1}, mask_truncated_completions=True, tito_log=tmp_path / "log.jsonl")
    with caplog.at_level(logging.WARNING, logger="tito_audit.guard"):
        trainer.train()  # raise mode: nothing raised
    assert trainer.losses == 2 and trainer.tito_failures == [] and trainer.tito_masked == ["ep1"]
    assert trainer.tito_checked == 3  # the other rows are checked as ever
    said = [r.getMessage() for r in caplog.records if "mask_truncated_completions" in r.getMessage()]
    assert len(said) == 1 and "not trained (intended)" in said[0] and "ep1" in said[0]
    assert [r["id"] for _, r in iter_records(tmp_path / "log.jsonl")] == ["ep0", "ep2", "ep3"]  # what was trained
    # A row that trains nothing without that option is no intended masking: its sampled turns are not trained
    untrained = [(p, c, [0] * len(m)) if n == 1 else (p, c, m) for n, (p, c, m) in enumerate(trained)]
    broken = Guarded(eps, untrained, tito_on_fail="return")
    broken.train()
    assert [eid for eid, _ in broken.tito_failures] == ["ep1"]


def test_each_rank_writes_its_own_log_and_rollout_fields_are_kept_or_refused(tmp_path):
    eps, trained = episodes(broken=set())
    for ep in eps:
        ep["metadata"] = {"env": "weather"}
    ranks = [Guarded(eps, trained, tito_log=tmp_path / "log.jsonl", rank=(r, 2)) for r in (0, 1)]
    for trainer in ranks:
        trainer.train()  # the same tito_log on both ranks, as a launcher gives it
    for r in (0, 1):
        records = [rec for _, rec in iter_records(tmp_path / f"log.rank{r}.jsonl")]
        assert [rec["id"] for rec in records] == ["ep0", "ep1", "ep2", "ep3"]
        assert records[0]["metadata"] == {"env": "weather", "step": 0, "mode": "train"}
    assert not (tmp_path / "log.jsonl").exists()
    eps[0]["reward_breakdown"] = [1.0]  # a field the log has no place for: named, not dropped
    with pytest.raises(RecordError, match=r"episode \d+ \(id 'ep0'\): unknown field.*reward_breakdown"):
        Guarded(eps, trained, tito_log=tmp_path / "other.jsonl").train()
