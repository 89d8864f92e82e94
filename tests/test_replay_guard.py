"""The run-time guard: passes a correct batch, names the first divergence of a broken one, takes tensors."""

from __future__ import annotations

import logging

import pytest
from conftest import SHARED_MODELS

from tito_audit import GuardResult, TitoGuardError, check_batch
from tito_audit.replay.analyze import ReplayContext
from tito_audit.replay.synthetic import log_episode, played_episodes

MODEL = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def plays(loaded):
    return played_episodes(loaded(MODEL), 0.5, seed=11)[:16]


def item(record):
    return {
        "sampled": [t["ids"] for t in record["turns"]],
        "input_ids": record["input_ids"],
        "loss_mask": record["loss_mask"],
    }


def test_correct_batch_passes_in_every_item_form(plays):
    rows = [item(log_episode(p, "correct", "").record) for p in plays]
    assert check_batch(rows).ok
    assert check_batch([p.traj for p in plays]).ok  # Trajectory objects as items
    columns = {k: [r[k] for r in rows] for k in rows[0]}
    assert check_batch(columns).episodes == len(rows)


def test_broken_batch_raises_with_the_first_divergence(plays, loaded):
    logged = [log_episode(p, "naive_retokenize", "") for p in plays]
    rows = [item(lg.record) for lg in logged]
    broken = [n for n, lg in enumerate(logged) if lg.truth]
    assert broken
    with pytest.raises(TitoGuardError) as info:
        check_batch(rows)
    result = info.value.result
    assert [f.episode for f in result.failures] == broken
    first = logged[broken[0]].truth[0]
    assert (result.first.divergence.turn, result.first.divergence.index) == (first.turn, first.index)
    named = check_batch(rows, tokenizer=loaded(MODEL).tokenizer, on_fail="return")
    assert named.first is not None and named.first.divergence.cls == "non_canonical"
    assert [f.episode for f in named.failures] == broken


def test_log_mode_and_stop_seam(plays, caplog):
    rows = [item(log_episode(p, "stop_seam", "").record) for p in plays[:3]]
    with caplog.at_level(logging.WARNING, logger="tito_audit.guard"):
        result = check_batch(rows, on_fail="log")
    assert isinstance(result, GuardResult) and not result.ok and len(caplog.records) == 3
    assert all(f.sampled_not_trained == f.mask_flips > 0 for f in result.failures)


def test_padded_tensors_and_shape_mismatch(plays):
    torch = pytest.importorskip("torch")
    rows = [item(log_episode(p, "correct", "").record) for p in plays[:4]]
    width = max(len(r["input_ids"]) for r in rows)
    batch = {
        "input_ids": torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in rows]),
        "loss_mask": torch.tensor([r["loss_mask"] + [0] * (width - len(r["loss_mask"])) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"])) for r in rows]),
        "sampled": [r["sampled"] for r in rows],
    }
    assert check_batch(batch).ok
    bad = dict(rows[0], loss_mask=rows[0]["loss_mask"][:-1])
    result = check_batch([bad], on_fail="return")
    assert result.first is not None and result.first.divergence.kind == "shape"


# Loops whose divergences change the sampled turns' ids or mask, which the guard sees without renders. (A
# duplicated untrained turn leaves every sampled turn trained in place: only a replay with renders finds it.)
GUARD_SEES = ("naive_retokenize", "stop_seam", "arguments_reserialized", "tool_calls_cleared", "turns_encoded_alone")


@pytest.mark.parametrize("spec", SHARED_MODELS)
def test_guard_flags_exactly_the_broken_episodes_at_the_first_injected_position(loaded, spec):
    model = loaded(spec)
    plays = played_episodes(model, 0.3, seed=3)[:12]
    stops = ReplayContext.from_model(model).stop_ids  # the turn's stop tokens, as a trainer passes them
    for loop in GUARD_SEES:
        logged = [log_episode(p, loop, "") for p in plays]
        rows = [item(lg.record) for lg in logged]
        result = check_batch(rows, tokenizer=model.tokenizer, stop_ids=stops, on_fail="return")
        assert [f.episode for f in result.failures] == [n for n, lg in enumerate(logged) if lg.truth], loop
        for f in result.failures:
            first = logged[f.episode].truth[0]
            assert (f.divergence.turn, f.divergence.index, f.divergence.cls) == (first.turn, first.index, first.cls)
    assert check_batch([item(log_episode(p, "correct", "").record) for p in plays]).ok
