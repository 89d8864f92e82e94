"""The run-time guard: passes a correct batch, names the first divergence of a broken one, takes tensors."""

from __future__ import annotations

import logging

import pytest

from tests.conftest import SHARED_MODELS
from tito_audit import GuardResult, TitoGuardError, check_batch
from tito_audit.replay.analyze import ReplayContext
from tito_audit.rollout.tokens import find_run
from tito_audit.testing.synthetic import log_episode, played_episodes

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


def test_a_native_record_with_sampled_beside_its_turns_is_read(plays):
    """``sampled`` next to a native record's ``turns`` (the same ids, one as id lists, one as turn objects) is one
    item, not a conflict; ids that really differ are refused by name."""
    rec = log_episode(plays[0], "correct", "").record
    same = {**rec, "sampled": [t["ids"] for t in rec["turns"]]}
    assert check_batch([same]).ok
    other = {**rec, "sampled": [[*t["ids"][:-1], t["ids"][-1] + 1] for t in rec["turns"]]}
    result = check_batch([other], on_fail="return")
    assert not result.ok and "'sampled' and 'turns' are both given and differ" in result.errors[0]


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
    failing = [r for r in caplog.records if r.getMessage().startswith("TITO guard: episode")]
    assert isinstance(result, GuardResult) and not result.ok and len(failing) == 3
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


# -- what the engine was given, masks under other names, batches that cannot be checked (red-team r3, r11, r12, r14)


def with_context(p, ids=None, mask=None):
    """A batch item with each turn's ``prompt_ids``: the context the engine was given (the buffer before the turn)."""
    spans = p.traj.sampled_spans()
    buffer = list(p.traj.input_ids)
    return {
        "sampled": [{"ids": t, "prompt_ids": buffer[:a]} for t, (a, _) in zip(p.turns, spans, strict=True)],
        "input_ids": buffer if ids is None else ids,
        "loss_mask": list(p.traj.loss_mask) if mask is None else mask,
    }


@pytest.fixture(scope="module")
def multi_turn(plays):
    return [p for p in plays if len(p.turns) >= 2 and len(p.traj.sampled_spans()) == len(p.turns)]


def test_a_turn_trained_after_a_context_the_engine_never_saw_is_caught(multi_turn, loaded):
    assert multi_turn
    tokenizer = loaded(MODEL).tokenizer
    correct = check_batch([with_context(p) for p in multi_turn], tokenizer=tokenizer)
    assert correct.ok and correct.complete and not correct.not_checked
    # The rollout drops the tool result (the delta before turn 1) from what it trains: every sampled turn is still
    # trained verbatim with the mask on it, so only the engine's prompt_ids can tell.
    dropped, cuts = [], []
    for p in multi_turn:
        (_, end0), (start1, _) = p.traj.sampled_spans()[:2]
        ids, mask = list(p.traj.input_ids), list(p.traj.loss_mask)
        dropped.append(with_context(p, ids[:end0] + ids[start1:], mask[:end0] + mask[start1:]))
        cuts.append(end0)
    result = check_batch(dropped, tokenizer=tokenizer, on_fail="return")
    assert [f.episode for f in result.failures] == list(range(len(multi_turn)))
    for f, cut in zip(result.failures, cuts, strict=True):
        d = f.divergence
        assert (d.turn, d.index, d.cls) == (1, cut, "history_rewrite"), f
        assert "lacks" in d.message and "which the engine was given" in d.message and f.context_mismatches >= 1
    with pytest.raises(TitoGuardError, match="turn 1 was sampled on another context"):
        check_batch(dropped)
    # Without prompt_ids the guard cannot see it, and says so instead of a plain pass.
    blind = [{**item, "sampled": [t["ids"] for t in item["sampled"]]} for item in dropped]
    unseen = check_batch(blind)
    assert unseen.ok and not unseen.complete
    assert any(n.startswith("context not checked") for n in unseen.not_checked)
    assert "context not checked" in unseen.summary()


def test_an_engine_given_a_re_encoded_history_is_caught(loaded):
    """The engine gets turn k's context re-rendered and re-encoded (a chat server), the trainer the token buffer:
    turn k is trained on a context other than the one it was sampled on, from the first split token on."""
    model = loaded(MODEL)
    plays = [p for p in played_episodes(model, 1.0, seed=3) if len(p.turns) >= 2 and p.splits[0] is not None][:3]
    assert plays
    items, truth = [], []
    for p in plays:
        tools = list(p.scenario.tools) or None
        assistants = [i for i, m in enumerate(p.messages) if m["role"] == "assistant"]
        engine = [
            p.renderer.encode(p.renderer.render(p.messages[:i], tools=tools, add_generation_prompt=True))
            for i in assistants
        ]
        items.append(
            {
                "sampled": [{"ids": t, "prompt_ids": e} for t, e in zip(p.turns, engine, strict=True)],
                "input_ids": list(p.traj.input_ids),
                "loss_mask": list(p.traj.loss_mask),
            }
        )
        truth.append(p.traj.sampled_spans()[0][0] + p.splits[0])
    result = check_batch(items, tokenizer=model.tokenizer, on_fail="return")
    assert [(f.divergence.turn, f.divergence.index, f.divergence.cls) for f in result.failures] == [
        (1, at, "non_canonical") for at in truth
    ]
    assert all(f.trained_not_sampled == f.sampled_not_trained == 0 for f in result.failures)  # ids and mask: exact
    assert all("(same text, other ids)" in f.divergence.message for f in result.failures)


def test_masks_under_other_names_are_checked_and_a_missing_mask_is_never_ok(plays):
    rows = [item(log_episode(p, "correct", "").record) for p in plays[:4]]
    labels = [
        {"sampled": r["sampled"], "input_ids": r["input_ids"],
         "labels": [t if m else -100 for t, m in zip(r["input_ids"], r["loss_mask"], strict=True)]}
        for r in rows
    ]  # fmt: skip
    assert check_batch(labels).ok  # Hugging Face labels: -100 where no loss
    everything = [{**r, "labels": list(r["input_ids"])} for r in labels]  # trains prompt, template, tool results
    trained_all = check_batch(everything, on_fail="return")
    assert len(trained_all.failures) == len(rows) and all(f.trained_not_sampled > 0 for f in trained_all.failures)
    shifted = [{**r, "labels": [*r["labels"][1:], -100]} for r in labels]  # labels shifted by the caller
    assert "labels train id" in check_batch(shifted, on_fail="return").first.divergence.message
    # verl: response_mask covers the response, the last positions of input_ids
    responses = []
    for r in rows:
        start = r["loss_mask"].index(1)
        response = r["loss_mask"][start:]
        responses.append({"sampled": r["sampled"], "input_ids": r["input_ids"], "response_mask": response})
    assert check_batch(responses).ok
    all_response = [{**r, "response_mask": [1] * len(r["response_mask"])} for r in responses]
    assert check_batch(all_response, on_fail="return").failures
    # No mask under any name: raise mode refuses; the other modes compare the ids and say the mask was not checked
    bare = [{"sampled": r["sampled"], "input_ids": r["input_ids"]} for r in rows]
    with pytest.raises(ValueError, match="item 0: no loss mask"):
        check_batch(bare)
    unmasked = check_batch(bare, on_fail="return")
    assert not unmasked.ok and not unmasked.failures and unmasked.unmasked == len(rows)
    assert any(n.startswith("mask not checked on 4 of 4") for n in unmasked.not_checked)


def test_a_batch_from_which_nothing_can_be_checked_is_never_ok():
    torch = pytest.importorskip("torch")
    columns = {  # two episodes whose trained ids differ from the sampled ones, under a name other than input_ids
        "sampled": [[[5, 6, 7]], [[8, 9]]],
        "tokens": torch.tensor([[1, 2, 99, 99, 99], [1, 2, 3, 99, 99]]),
        "loss_mask": torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]),
    }
    with pytest.raises(ValueError, match=r"needs an 'input_ids' column.*'tokens'"):
        check_batch(columns)
    result = check_batch(columns, on_fail="return")
    assert not result.ok and result.episodes == 0 and "input_ids" in result.errors[0]
    rows = [{"sampled": s, "tokens": t, "loss_mask": m} for s, t, m in zip(*columns.values(), strict=True)]
    assert not check_batch(rows, on_fail="return").ok
    with pytest.raises(ValueError, match="item 0: no 'input_ids'"):
        check_batch(rows)
    assert not check_batch([], on_fail="return").ok
    with pytest.raises(ValueError, match="the batch has no episodes"):
        check_batch([])


def test_padding_the_labels_train_is_trained_and_never_sampled(plays):
    """Hugging Face's loss ignores only ``-100`` labels, never ``attention_mask``: ``labels = input_ids.clone()``
    with -100 on the prompt alone trains every pad. Those positions are trained ids never sampled, not padding to
    drop (red team G1); pads with -100 labels are still dropped."""
    torch = pytest.importorskip("torch")
    record = log_episode(plays[0], "correct", "").record
    ids, mask, pad = record["input_ids"], record["loss_mask"], 0
    labels = [t if m else -100 for t, m in zip(ids, mask, strict=True)]
    base = {"sampled": [t["ids"] for t in record["turns"]], "input_ids": torch.tensor(ids + [pad] * 4)}
    base["attention_mask"] = torch.tensor([1] * len(ids) + [0] * 4)
    clean = check_batch([dict(base, labels=torch.tensor(labels + [-100] * 4))], on_fail="return")
    assert clean.ok
    trained_pads = check_batch([dict(base, labels=torch.tensor(labels + [pad] * 4))], on_fail="return")
    assert not trained_pads.ok and trained_pads.first is not None
    assert trained_pads.first.trained_not_sampled == 4 and trained_pads.first.divergence.index == len(ids)


def test_an_attention_hole_inside_the_sequence_fails_the_item(plays, tmp_path):
    """Red team 47: a loop that sets ``pad_token = eos_token`` and masks ``ids != pad_token_id`` hides each sampled
    stop token from every later position; the trainer computes them on a context the engine never had. A 0 between
    two attended positions fails the item (the guard) and is refused by ``LogWriter``; padding at either end is
    still dropped, and the same item with the hole filled passes."""
    from tito_audit import LogWriter
    from tito_audit.replay.schema import RecordError

    record = log_episode(next(p for p in plays if len(p.turns) > 1), "correct", "").record
    ids = record["input_ids"]
    first = record["turns"][0]["ids"]
    stop = first[-1]
    at = find_run(ids, first, 0)
    assert at is not None and record["loss_mask"][at + len(first) - 1] == 1
    hole = at + len(first) - 1  # the first turn's sampled stop, trained
    base = {"sampled": [t["ids"] for t in record["turns"]], "loss_mask": [0, 0, *record["loss_mask"], 0]}
    base["input_ids"] = [stop, stop, *ids, stop]
    attention = [0, 0, *[1] * len(ids), 0]
    assert check_batch([dict(base, attention_mask=attention)], on_fail="return").ok  # padding at both ends
    holed = list(attention)
    holed[hole + 2] = 0
    result = check_batch([dict(base, attention_mask=holed)], on_fail="return")
    assert not result.ok and result.first is not None
    assert result.first.divergence.index == hole + 2 and "attention_mask hides a trained id" in str(result.first)
    with pytest.raises(TitoGuardError, match="inside the sequence"):
        check_batch([dict(base, attention_mask=holed)])
    with LogWriter(tmp_path / "log.jsonl") as log, pytest.raises(RecordError, match="attention_mask hides"):
        log.write(dict(base, attention_mask=holed))


def test_the_guard_example_runs_as_ci_runs_it():
    """``examples/guard_training_loop.py`` (run by CI and named in docs/replay.md): the correct loop's batches are
    complete (ids, mask, stops and every turn's context compared), the re-tokenizing loop is stopped."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run(
        [sys.executable, "examples/guard_training_loop.py"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("trained exactly as sampled, after the context each turn was sampled on") == 2
    assert "-- naive_retokenize loop\nstep 0: TITO guard:" in done.stdout


def test_a_turn_with_prompt_ids_must_be_trained_where_it_was_sampled(loaded):
    """Red team 55: the user asks the model to repeat a sentence, so the prompt holds the sampled ids once more; a
    mask builder that marks the first copy of the response trains the user's copy and leaves the sampled turn
    untrained. The trained runs equal the sampled turns, and the ids after ``prompt_ids`` are the turn: only the
    turn's place (right after its ``prompt_ids``) tells the copy from the turn."""
    tok = loaded(MODEL).tokenizer
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Say exactly:\nIt is 6."}], add_generation_prompt=True, tokenize=False
    )
    prompt = tok.encode(text, add_special_tokens=False)
    turn = [*tok.encode("It is 6.", add_special_tokens=False), stop]
    ids = prompt + turn
    copy = find_run(prompt, turn, 0)
    assert copy is not None and copy + len(turn) < len(prompt)  # the user's copy, stop included, in the prompt

    def mask(*starts: int) -> list[int]:
        return [int(any(s <= j < s + len(turn) for s in starts)) for j in range(len(ids))]

    def item(m: list[int]) -> dict:
        return {"sampled": [{"ids": turn, "prompt_ids": prompt}], "input_ids": ids, "loss_mask": m}

    assert check_batch([item(mask(len(prompt)))], stop_ids=[stop]).complete
    for kw in ({"stop_ids": [stop]}, {"tokenizer": tok}):
        result = check_batch([item(mask(copy))], on_fail="return", **kw)
        assert not result.ok and result.first is not None
        assert result.first.divergence.index == len(prompt)
        assert "is not trained there" in result.first.divergence.message
        assert (result.first.trained_not_sampled, result.first.sampled_not_trained) == (len(turn), len(turn))
    with pytest.raises(TitoGuardError, match="sampled at token"):
        check_batch([item(mask(copy))], stop_ids=[stop])
    # without prompt_ids the place is unknown, and the guard says the context was not compared
    plain = check_batch([{"sampled": [turn], "input_ids": ids, "loss_mask": mask(copy)}], stop_ids=[stop])
    assert plain.ok and not plain.complete
