"""Ids after the stop token inside a sampled turn, and the Parquet fast path's environment readings (red team 52).

A loop that counts what the template writes after the turn's end as part of the response (Qwen's ``<|im_end|>\\n``,
Gemma's ``<end_of_turn>\\n``), or that pads a final turn past its stop, trains ids the policy never sampled: the
engine stopped at the stop token. Its log stays self-consistent (the next prompt holds those ids where the loop put
them), so the TITO check alone calls it exact, and ``Trajectory.append_sampled`` refuses the same ids. Replay must
name it from the ids and the stop ids alone, with renders or without, and the trainer guard too.

A Parquet log replayed with ``--only-tito`` decides exact rows on Arrow buffers (``replay.columns``): it must read
the environment evidence as the JSONL path does, not pass the rows it decides over in silence.
"""

from __future__ import annotations

import copy

import pytest

from tests.conftest import write_jsonl
from tests.replay.conftest import QWEN
from tests.replay.test_environment_tokens import glued, tail_glued, tito_only
from tito_audit import check_batch
from tito_audit.replay import build_report, replay_log
from tito_audit.replay.analyze import analyze
from tito_audit.replay.schema import episode_from_native
from tito_audit.testing.synthetic import log_episode, with_engine_prompts

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

GEMMA = "google/gemma-2-2b-it"


def after_stop(p, ctx) -> tuple[dict, list[int]] | None:  # type: ignore[no-untyped-def]
    """The record of a loop that glues the first id the template writes after each non-final turn's stop (when it
    is no message header) to that turn's ids, with a log-prob that looks real, and trains it; and the glued places
    in the trained sequence. None where no turn has such an id."""
    record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
    spans = p.traj.sampled_spans()
    ids_all = list(p.traj.input_ids)
    mask = list(record["loss_mask"])
    places = []
    for k in range(len(spans) - 1):
        b = spans[k][1]
        turn = record["turns"][k]
        nxt = ids_all[b] if b < spans[k + 1][0] else None
        if not turn["ids"] or turn["ids"][-1] not in ctx.stop_ids or nxt is None or nxt in ctx.header_ids:
            continue
        turn["ids"] = turn["ids"] + [nxt]
        turn["logprobs"] = turn["logprobs"] + [-0.02]
        mask[b] = 1
        places.append(b)
    record["loss_mask"] = mask
    return (record, places) if places else None


@pytest.mark.parametrize("model", [QWEN, GEMMA])
def test_the_newline_after_the_stop_counted_as_sampled_is_unsafe_at_its_id(plays, model, tmp_path):
    loaded, ctx, played = plays(model, 0.0, 5)
    rows = []
    for n, p in enumerate(played):
        got = after_stop(p, ctx)
        if got is None:
            continue
        record, places = got
        rows.append(record)
        for c in (ctx, tito_only(loaded)):
            res = analyze(episode_from_native(copy.deepcopy(record), n), c)
            assert res.divergences, (p.scenario.id, "called exact")
            d = res.divergences[0]
            assert (d.index, d.cls) == (places[0], "environment"), (p.scenario.id, d)
            assert "after the stop token" in d.message
            assert res.trained_not_sampled >= len(places)
    assert len(rows) > 10
    totals = replay_log(write_jsonl(tmp_path / "log.jsonl", rows), ctx)
    assert build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0].verdict == "unsafe"
    # the trainer guard, given the stop ids (or a tokenizer whose eos is the turn's stop), says so too
    guard = check_batch(rows, on_fail="return", stop_ids=ctx.stop_ids)
    assert not guard.ok and len(guard.failures) == len(rows)
    assert all("after the stop token" in f.divergence.message for f in guard.failures)


def test_a_pad_after_the_final_stop_and_an_untrained_one(plays):
    """The last turn padded after its stop and logged as sampled (nothing after it contradicts the pad): trained, it
    is unsafe. Pads kept out of the sampled ids and masked 0 (what a collator adds) are nothing to find."""
    loaded, ctx, played = plays(QWEN, 0.0, 5)
    pad = loaded.tokenizer.pad_token_id
    assert pad is not None and pad not in ctx.stop_ids
    checked = 0
    for n, p in enumerate(played):
        record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
        last = record["turns"][-1]
        if not last["ids"] or last["ids"][-1] not in ctx.stop_ids:
            continue
        end = len(last["prompt_ids"]) + len(last["ids"])
        ids = [*record["input_ids"][:end], pad, pad]
        for trained, found in ((1, True), (0, False)):
            rec = dict(copy.deepcopy(record), input_ids=ids, loss_mask=record["loss_mask"][:end] + [trained] * 2)
            if trained:  # logged as the policy's
                rec["turns"][-1]["ids"] = last["ids"] + [pad, pad]
                rec["turns"][-1]["logprobs"] = last["logprobs"] + [-0.5, -0.5]
            res = analyze(episode_from_native(rec, n), tito_only(loaded))
            assert bool(res.divergences) is found, (p.scenario.id, trained, res.divergences)
            guard = check_batch([rec], on_fail="return", tokenizer=loaded.tokenizer)
            assert guard.ok is not found
        checked += 1
    assert checked > 10


def write_parquet(path, rows):  # type: ignore[no-untyped-def]
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    return path


@pytest.mark.parametrize("model", [QWEN, "mistralai/Mistral-Nemo-Instruct-2407"])
def test_parquet_with_only_tito_reads_the_environment_as_jsonl_does(plays, model, tmp_path):
    """Red team 52: the same records as JSONL and as Parquet, replayed with ``--only-tito``: the Parquet fast path
    called loops exact that glue a message to the next turn (a stop inside the turn, a turn opening with a
    message), glue one after a turn cut before its stop (trailing 0.0 log-probs over a header), or count the id
    after the stop as sampled. Now both paths give the same totals and findings, and a correct loop stays exact."""
    loaded, ctx, played = plays(model, 0.0, 5)
    tito = tito_only(loaded)
    assert tito.whatif is False and tito.noncanonical is False  # the configuration that takes the fast path
    broken, correct = [], []
    for p in played:
        correct.append(with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p))
        for record in (glued(p, fill=-0.25)[0], tail_glued(p, 0.0), (after_stop(p, ctx) or (None,))[0]):
            if record is not None and record != correct[-1]:
                broken.append(record)
    keep = ("id", "turns", "input_ids", "loss_mask")
    for rows, unsafe in ((broken, True), (correct, False)):
        rows = [{k: r[k] for k in keep} for r in rows]
        js = replay_log(write_jsonl(tmp_path / "t.jsonl", rows), tito)
        par = replay_log(write_parquet(tmp_path / "t.parquet", rows), tito)
        assert par.to_dict() == js.to_dict()
        assert par.findings == js.findings
        report = build_report(par, loaded, "log", ctx.renderer.token_texts).models[0]
        assert (report.verdict == "unsafe") is unsafe, report.verdict
        if unsafe:
            assert par.diverged_episodes == len(rows) > 10, (par.diverged_episodes, len(rows))
        else:
            assert par.diverged_episodes == 0 and par.checked_episodes == len(rows)
    # the fast path still decides a correct loop's rows on the buffers (the environment readings left them to it)
    from tito_audit.replay.columns import exact_rows

    openers = frozenset().union(*(h for h, _ in tito.openings))
    batch = pa.Table.from_pylist([{k: r[k] for k in keep} for r in correct]).to_batches()[0]
    fast = exact_rows(batch, tito.stop_ids, tito.marks, 16, tito.header_ids, openers)
    assert fast is not None and fast.exact.all()
    batch = pa.Table.from_pylist([{k: r[k] for k in keep} for r in broken]).to_batches()[0]
    fast = exact_rows(batch, tito.stop_ids, tito.marks, 16, tito.header_ids, openers)
    assert fast is not None and not fast.exact.any()


def cut_before_stop(record: dict, stops, only: int | None = None) -> dict:  # type: ignore[no-untyped-def]
    """The record of a loop that logs each turn (or turn ``only``) without the stop the engine sampled, and trains
    it with mask 0."""
    rec = copy.deepcopy(record)
    for k, turn in enumerate(rec["turns"]):
        if only is not None and k != only:
            continue
        if turn["ids"] and turn["ids"][-1] in stops:
            at = len(turn["prompt_ids"]) + len(turn["ids"]) - 1
            turn["ids"], turn["logprobs"] = turn["ids"][:-1], turn["logprobs"][:-1]
            if at < len(rec["loss_mask"]):
                rec["loss_mask"][at] = 0
    return rec


def test_a_loop_that_never_trains_the_stop_is_never_safe(plays, tmp_path):
    """Red team 52: every turn logged one id short (the stop the engine sampled cut off, untrained): the engine's
    prompts, the turns and the trained sequence agree, and the loop was called exact with nothing named, while its
    policy is never trained to end a turn. The log cannot tell it from turns a length limit cut, so it is named
    beside the verdict (never ``safe``), on JSONL and Parquet alike; one cut turn among turns that end with their
    stop is a length limit's, and not named."""
    from tito_audit.report.loop_verdict import STOPS_NEVER_TRAINED

    loaded, ctx, played = plays(QWEN, 0.0, 5)
    tito = tito_only(loaded)
    keep = ("id", "turns", "input_ids", "loss_mask")
    correct = [with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p) for p in played]
    cut = [cut_before_stop(r, ctx.stop_ids) for r in correct]
    one_cut = [cut_before_stop(correct[0], ctx.stop_ids, only=0), *correct[1:]]
    for rows, named in ((cut, True), (correct, False), (one_cut, False)):
        rows = [{k: r[k] for k in keep} for r in rows]
        for path in (write_jsonl(tmp_path / "c.jsonl", rows), write_parquet(tmp_path / "c.parquet", rows)):
            totals = replay_log(path, tito)
            report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
            assert (STOPS_NEVER_TRAINED in report.verdict_reasons) is named, (path.suffix, report.verdict_reasons)
            assert totals.diverged_episodes == 0
            if named:
                assert report.verdict != "safe" and totals.stop_turns == 0 and totals.stop_untrained_turns > 10


def test_the_stop_cut_from_every_turn_but_the_last_or_dropped_everywhere_is_named(plays, tmp_path):
    """Red team 53: the stop cut from every turn but each episode's last (which ends with it) was SAFE: the rule
    asked for no turn ending with one. At least as many turns followed by their stop untrained as turns followed
    by more that end with it are named; so is a log whose turns never end with a stop, the stop dropped from the
    trained sequence and the prompts too (nothing then follows untrained)."""
    from tito_audit.report.loop_verdict import STOPS_NEVER_TRAINED

    loaded, ctx, played = plays(QWEN, 0.0, 5)
    stops = set(ctx.stop_ids)
    keep = ("id", "turns", "input_ids", "loss_mask")
    correct = [with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p) for p in played]
    but_last, dropped = [], []
    for r in correct:
        cut = cut_before_stop(r, stops)
        cut["turns"][-1] = r["turns"][-1]
        last = r["turns"][-1]
        end = len(last["prompt_ids"]) + len(last["ids"])
        cut["loss_mask"] = cut["loss_mask"][: len(last["prompt_ids"])] + r["loss_mask"][len(last["prompt_ids"]) : end]
        cut["input_ids"] = r["input_ids"][:end]
        but_last.append(cut)
        gone = copy.deepcopy(r)  # every stop id taken out of the ids, the mask and the prompts alike
        keep_at = [j for j, i in enumerate(r["input_ids"]) if i not in stops]
        gone["input_ids"] = [r["input_ids"][j] for j in keep_at]
        gone["loss_mask"] = [r["loss_mask"][j] for j in keep_at]
        for t in gone["turns"]:
            kept = [j for j, i in enumerate(t["ids"]) if i not in stops]
            t["ids"], t["logprobs"] = [t["ids"][j] for j in kept], [t["logprobs"][j] for j in kept]
            t["prompt_ids"] = [i for i in t["prompt_ids"] if i not in stops]
        dropped.append(gone)
    tito = tito_only(loaded)
    for rows in (but_last, dropped):
        rows = [{k: r[k] for k in keep} for r in rows]
        for path in (write_jsonl(tmp_path / "c.jsonl", rows), write_parquet(tmp_path / "c.parquet", rows)):
            totals = replay_log(path, tito)
            report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
            assert STOPS_NEVER_TRAINED in report.verdict_reasons, (path.suffix, report.verdict_reasons)
            assert report.verdict != "safe"


@pytest.mark.parametrize("model", [QWEN, GEMMA])
def test_an_untrained_id_after_the_stop_logged_with_the_turn_is_no_sample_dropped(plays, model):
    """Red team 53: the template's newline after the stop logged with the turn but trained nowhere (a loop that takes
    the prompt's delta as the response and masks with the template's assistant mask) was read as a sampled id left
    untrained: unsafe, "drops sampled ones". The engine never sampled it; the loop trains exactly what it did."""
    loaded, ctx, played = plays(model, 0.0, 5)
    checked = 0
    for n, p in enumerate(played):
        got = after_stop(p, ctx)
        if got is None:
            continue
        record, places = got
        for at in places:
            record["loss_mask"][at] = 0
        for turn in record["turns"]:  # the engine gave no log-prob for an id it never sampled: a 0.0 fill
            if len(turn["ids"]) > 1 and turn["ids"][-2] in ctx.stop_ids:
                turn["logprobs"][-1] = 0.0
        for c in (ctx, tito_only(loaded)):
            res = analyze(episode_from_native(copy.deepcopy(record), n), c)
            assert not res.divergences, (p.scenario.id, res.divergences)
            assert any("not read as sampled" in note for note in res.notes)
        assert check_batch([record], on_fail="return", stop_ids=ctx.stop_ids).ok
        checked += 1
    assert checked > 10


def glued_to_the_final_turn(p, end: int, tail: list[int], replaced: int = 0) -> dict | None:  # type: ignore[no-untyped-def]
    """The record of episode ``p`` whose final turn ends on ``end``, with ``tail`` logged after it with the turn and
    trained (``replaced``: how many of the turn's last ids give way to ``tail``); None where the turn ends otherwise."""
    record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
    last = record["turns"][-1]
    if not last["ids"] or last["ids"][-1] != end:
        return None
    cut = len(last["ids"]) - replaced
    at = len(last["prompt_ids"]) + cut
    last["ids"], last["logprobs"] = [*last["ids"][:cut], *tail], [*last["logprobs"][:cut], *[-0.01] * len(tail)]
    record["input_ids"] = [*record["input_ids"][:at], *tail]
    record["loss_mask"] = [*record["loss_mask"][:at], *[1] * len(tail)]
    return record


def each_named_after_the_stop(found, rows: list) -> bool:  # type: ignore[no-untyped-def]
    """Whether the guard failed every row, each for ids trained after the stop."""
    return len(found.failures) == len(rows) and all("after the stop" in f.divergence.message for f in found.failures)


def qwen_end_of_text_glued(plays) -> tuple[list[dict], int, int]:  # type: ignore[no-untyped-def]
    """Red team 55's rows: Qwen2.5's engine stopped on ``<|endoftext|>`` (its generation config's eos) where the
    template's ``<|im_end|>`` stood, and the loop glued ``<|im_end|>`` after it and trained it; with the two ids."""
    loaded, _, played = plays(QWEN, 0.0, 5)
    im_end, text_end = (loaded.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>"))
    rows = [r for p in played if (r := glued_to_the_final_turn(p, im_end, [text_end, im_end], replaced=1)) is not None]
    assert len(rows) > 10
    return rows, im_end, text_end


def test_check_batch_takes_the_template_s_turn_end_from_a_tokenizer_and_says_when_it_has_no_stops(plays):
    """Red team 53: Gemma's eos is not its turn end: ``tokenizer=`` alone missed ``<end_of_turn><eos>`` trained as
    sampled, and called the batch complete. The stops now come from the tokenizer's chat template too; without a
    tokenizer or stop ids, "ids after the stop not checked" is said and the batch is not complete."""
    loaded, ctx, played = plays(GEMMA, 0.0, 5)
    eos = loaded.tokenizer.eos_token_id
    end = next(i for i in ctx.stop_ids if i != eos)
    rows = [r for p in played if (r := glued_to_the_final_turn(p, end, [eos])) is not None]
    assert len(rows) > 10
    found = check_batch(rows, on_fail="return", tokenizer=loaded.tokenizer)
    assert each_named_after_the_stop(found, rows)
    blind = check_batch(rows, on_fail="return")
    assert blind.ok and not blind.complete
    assert any(n.startswith("ids after the stop not checked") for n in blind.not_checked)


def test_check_batch_stops_on_the_eos_ids_of_the_generation_config_beside_the_tokenizer(plays, tmp_path):
    """Red team 55: Qwen2.5's engine also stops on ``<|endoftext|>`` (its generation_config.json's eos), which the
    tokenizer does not name; a loop that appends ``<|im_end|>`` after it with the turn and trains it trains an id
    never sampled, and ``check_batch(tokenizer=...)`` passed it. A tokenizer loaded from a folder with that file
    (or a Hub id whose cached snapshot holds it) stops on those ids too."""
    from transformers import AutoTokenizer

    from tests.conftest import snapshot

    rows, im_end, text_end = qwen_end_of_text_glued(plays)
    folder = tmp_path / "qwen"
    folder.mkdir()
    for f in snapshot(QWEN).iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    blind = check_batch(rows, on_fail="return", tokenizer=AutoTokenizer.from_pretrained(str(folder)))
    assert blind.ok, blind.failures[:1]  # what the tokenizer alone knows: <|im_end|> ends each turn
    (folder / "generation_config.json").write_text(f'{{"eos_token_id": [{im_end}, {text_end}]}}')
    found = check_batch(rows, on_fail="return", tokenizer=AutoTokenizer.from_pretrained(str(folder)))
    assert each_named_after_the_stop(found, rows)


def test_the_generation_config_is_read_from_the_hub_cache_for_a_tokenizer_loaded_by_repo_id(
    plays, tmp_path, monkeypatch
):
    """The Hub branch of the test above: a caller's ``AutoTokenizer.from_pretrained("Qwen/...")`` names a repo id,
    not a folder; its cached snapshot's generation_config.json gives the engine's eos ids, read from the cache the
    tokenizer was loaded from (nothing downloaded). The shared cache holds neither that file nor the config.json
    ``AutoTokenizer`` needs for a repo id, so its snapshot is copied into a cache of the test's own and they are added
    there."""
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    from tests.conftest import snapshot
    from tito_audit.sources.load import generation_eos_ids_beside

    rows, im_end, text_end = qwen_end_of_text_glued(plays)
    repo = tmp_path / "hub" / f"models--{QWEN.replace('/', '--')}"
    files = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567"
    files.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(files.name)
    for f in snapshot(QWEN).iterdir():
        (files / f.name).write_bytes(f.read_bytes())
    (files / "config.json").write_text('{"model_type": "qwen2"}')  # AutoTokenizer reads it for a repo id; no eos
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    tok = AutoTokenizer.from_pretrained(QWEN, cache_dir=str(tmp_path / "hub"))
    assert tok.name_or_path == QWEN and generation_eos_ids_beside(tok) == ()
    assert check_batch(rows, on_fail="return", tokenizer=tok).ok
    (files / "generation_config.json").write_text(f'{{"eos_token_id": [{im_end}, {text_end}]}}')
    tok = AutoTokenizer.from_pretrained(QWEN, cache_dir=str(tmp_path / "hub"))  # a new one: the guard reads each once
    assert generation_eos_ids_beside(tok) == (im_end, text_end)
    found = check_batch(rows, on_fail="return", tokenizer=tok)
    assert each_named_after_the_stop(found, rows)


def merged_turns(record: dict, stops) -> dict | None:  # type: ignore[no-untyped-def]
    """Red team 54: a loop that logs turn 0, the tool result and turn 1 as one response (verl-style) and trains only
    up to turn 0's stop: the policy's second answer is sampled and never trained."""
    turns = record["turns"]
    if len(turns) < 2 or not turns[0]["ids"] or turns[0]["ids"][-1] not in stops:
        return None
    rec = copy.deepcopy(record)
    rec.pop("messages", None)  # its turns no longer pair with the assistant messages
    first, second = rec["turns"][0], rec["turns"][1]
    start = len(first["prompt_ids"])
    end = len(second["prompt_ids"]) + len(second["ids"])
    merged = rec["input_ids"][start:end]
    gap = len(merged) - len(first["ids"]) - len(second["ids"])
    first["logprobs"] = first["logprobs"] + [0.0] * gap + second["logprobs"]
    first["ids"] = merged
    rec["turns"] = [first, *rec["turns"][2:]]
    for j in range(start + len(turns[0]["ids"]), end):
        rec["loss_mask"][j] = 0
    return rec


def test_a_sampled_turn_merged_after_the_stop_and_left_untrained_is_never_trimmed(plays):
    """Only what a template writes after a turn's end is left out of a turn (no header, no real log-prob): a next
    turn merged into this one and left untrained is a sampled turn dropped, unsafe, in replay and in the guard."""
    loaded, ctx, played = plays(QWEN, 0.0, 5)
    checked = 0
    for n, p in enumerate(played):
        record = merged_turns(with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p), ctx.stop_ids)
        if record is None:
            continue
        for c in (ctx, tito_only(loaded)):
            res = analyze(episode_from_native(copy.deepcopy(record), n), c)
            assert res.divergences and res.sampled_not_trained > 0, (p.scenario.id, res.divergences)
        assert not check_batch([record], on_fail="return", tokenizer=loaded.tokenizer).ok
        checked += 1
    assert checked > 10


def test_a_rare_length_cut_is_not_named_and_a_stop_dropped_from_inner_turns_is(plays, tmp_path):
    """Red team 54: one turn closed by the template after a length limit among single-turn episodes was named (the
    rule compared with non-final turns only); and the stop dropped from every turn but the last, from the trained
    sequence and the prompts too (nothing follows untrained), was not."""
    from tito_audit.report.loop_verdict import STOPS_NEVER_TRAINED

    loaded, ctx, played = plays(QWEN, 0.0, 5)
    stops = set(ctx.stop_ids)
    tito = tito_only(loaded)
    correct = [with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p) for p in played]
    singles = [dict(r, turns=r["turns"][:1]) for r in correct]
    for r in singles:  # the first turn alone, as a single-turn episode
        t = r["turns"][0]
        end = len(t["prompt_ids"]) + len(t["ids"])
        r["input_ids"], r["loss_mask"] = r["input_ids"][:end], r["loss_mask"][:end]
    one_cut = [*singles, cut_before_stop(correct[0], stops, only=0)]
    inner_dropped = []
    for r in correct:  # every stop but the last turn's taken out of the turns, the trained ids and the prompts
        gone = copy.deepcopy(r)
        drop = set()
        for t in gone["turns"][:-1]:
            if t["ids"] and t["ids"][-1] in stops:
                drop.add(len(t["prompt_ids"]) + len(t["ids"]) - 1)
                t["ids"], t["logprobs"] = t["ids"][:-1], t["logprobs"][:-1]
        kept = [j for j in range(len(r["input_ids"])) if j not in drop]
        gone["input_ids"] = [r["input_ids"][j] for j in kept]
        gone["loss_mask"] = [r["loss_mask"][j] for j in kept]
        for t in gone["turns"]:  # each prompt: the kept ids before the turn (a prefix of the trained ids)
            t["prompt_ids"] = gone["input_ids"][: sum(1 for j in kept if j < len(t["prompt_ids"]))]
        inner_dropped.append(gone)
    keep = ("id", "turns", "input_ids", "loss_mask")
    for rows, named in ((one_cut, False), (inner_dropped, True)):
        rows = [{k: r[k] for k in keep} for r in rows]
        totals = replay_log(write_jsonl(tmp_path / "s.jsonl", rows), tito)
        report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
        assert (STOPS_NEVER_TRAINED in report.verdict_reasons) is named, report.verdict_reasons
        assert totals.diverged_episodes == 0, report.verdict_reasons
        guard = check_batch(rows, on_fail="return", tokenizer=loaded.tokenizer)
        assert guard.ok and any(n.startswith("stop maybe not trained") for n in guard.not_checked) is named


def test_every_turn_of_some_episodes_cut_before_the_stop_is_named(plays, tmp_path):
    """Red team 55: two of five episodes log every turn without its stop (followed by it untrained), three keep it:
    by the whole log's share fewer turns are cut than hold their stop, and the loop was called exact, exit 0. A
    length limit cuts a turn, not every turn of an episode of several: one loop path that cuts the stop is named,
    on JSONL and Parquet, and by the guard; a single-turn episode cut once is still a length limit's."""
    from tito_audit.report.loop_verdict import STOPS_NEVER_TRAINED

    loaded, ctx, played = plays(QWEN, 0.0, 5)
    tito = tito_only(loaded)
    keep = ("id", "turns", "input_ids", "loss_mask")
    correct = [with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p) for p in played]
    several = [r for r in correct if len(r["turns"]) >= 3]
    assert len(several) > 10
    mixed = [*several[:3], *(cut_before_stop(r, ctx.stop_ids) for r in several[3:5])]
    rows = [{k: r[k] for k in keep} for r in mixed]
    for path in (write_jsonl(tmp_path / "m.jsonl", rows), write_parquet(tmp_path / "m.parquet", rows)):
        totals = replay_log(path, tito)
        assert totals.stop_ended_turns > totals.stop_untrained_turns > 0  # the whole log's share alone: not named
        assert (totals.stop_cut_episodes, totals.stopless_episodes, totals.diverged_episodes) == (2, 2, 0)
        report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
        assert STOPS_NEVER_TRAINED in report.verdict_reasons and report.verdict != "safe", path.suffix
        assert "look cut before their stop token" in report.verdict_explanation
    guard = check_batch(rows, on_fail="return", stop_ids=ctx.stop_ids)
    assert guard.ok and any(n.startswith("stop maybe not trained") for n in guard.not_checked)
    # red team 56: a length limit that cut both turns of one episode of two (Trajectory(on_truncated="mask") closes
    # each with its stop untrained), or every turn of one long episode among more than ten, is not named
    two = [r for r in correct if len(r["turns"]) == 2]
    for rare in (
        [*correct[1:], cut_before_stop(two[0], ctx.stop_ids)],
        [*correct, cut_before_stop(several[0], ctx.stop_ids)],
    ):
        rows = [{k: r[k] for k in keep} for r in rare]
        totals = replay_log(write_jsonl(tmp_path / "r.jsonl", rows), tito)
        assert totals.stop_untrained_turns > 0 and totals.stop_cut_episodes * 10 < totals.stop_long_episodes
        report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
        assert STOPS_NEVER_TRAINED not in report.verdict_reasons, report.verdict_reasons
        guard = check_batch(rows, on_fail="return", stop_ids=ctx.stop_ids)
        assert guard.complete, guard.not_checked


def test_a_stop_trained_before_an_id_glued_after_it_is_not_called_cut(plays, tmp_path):
    """Red team 55: every turn holds its stop, trained, with the newline the template writes after it glued on and
    trained (unsafe: the newline was never sampled). No turn ends with the stop, and every episode was counted
    stopless, so the report also said the stop looked cut from the turns: a stop a turn holds is a stop it ends on."""
    from tito_audit.report.loop_verdict import STOPS_NEVER_TRAINED

    loaded, ctx, played = plays(GEMMA, 0.0, 5)
    rows = []
    for p in played:
        got = after_stop(p, ctx)
        if got is not None:
            rows.append(got[0])
    assert len(rows) > 10
    totals = replay_log(write_jsonl(tmp_path / "g.jsonl", rows), ctx)
    report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
    assert report.verdict == "unsafe" and totals.stopless_episodes == totals.stop_cut_episodes == 0
    assert STOPS_NEVER_TRAINED not in report.verdict_reasons, report.verdict_reasons


def search_r1_episode(tok, n: int, turns: int) -> dict:  # type: ignore[no-untyped-def]
    """A Search-R1 style episode: the engine stops on the string ``</search>`` (no stop token), the loop appends the
    retriever's text as plain text (``<information>...</information>``, no message header), and the last turn ends
    on the model's stop token; every sampled id trained, every other id not."""
    text = tok.apply_chat_template(
        [{"role": "user", "content": f"Who wrote book {n}?"}], add_generation_prompt=True, tokenize=False
    )
    prompt = tok.encode(text, add_special_tokens=False)
    ids, mask, logged = list(prompt), [0] * len(prompt), []
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    for k in range(turns):
        last = k == turns - 1
        search = f"<think>Look it up.</think>\n<search>book {n} part {k}</search>"
        text = f"<answer>Author {n}</answer>" if last else search
        sampled = tok.encode(text, add_special_tokens=False) + ([stop] if last else [])
        logged.append({"ids": sampled, "logprobs": [-0.25] * len(sampled), "prompt_ids": list(ids)})
        ids += sampled
        mask += [1] * len(sampled)
        if not last:
            text = f"\n\n<information>Doc {k}: book {n} was written by someone.</information>\n\n"
            env = tok.encode(text, add_special_tokens=False)
            ids += env
            mask += [0] * len(env)
    return {"id": f"r1-{n}", "turns": logged, "input_ids": ids, "loss_mask": mask}


def test_a_loop_that_stops_on_a_string_is_not_called_cut_before_its_stop(plays, tmp_path):
    """Red team 56: a loop that stops on a stop string (Search-R1's ``</search>``) and appends the environment's
    text after it (``<information>``, no message header) ends its inner turns without a stop token, followed by
    more ids: read as turns cut before their stop, ``stops_never_trained`` and the guard's ``stop maybe not
    trained`` were named beside an exact loop. A turn counts as cut before its stop only where what follows it
    holds a control token of the tokenizer (the template writing on: a header, its turn end); the same turns
    followed by the template's next message (a header) still count."""
    from tito_audit.report.loop_verdict import STOPS_NEVER_TRAINED

    loaded, _, _ = plays(QWEN, 0.0, 5)
    tok = loaded.tokenizer
    tito = tito_only(loaded)
    rows = [search_r1_episode(tok, n, 3 + n % 2) for n in range(12)]
    totals = replay_log(write_jsonl(tmp_path / "r1.jsonl", rows), tito)
    report = build_report(totals, loaded, "log", {}).models[0]
    assert totals.diverged_episodes == 0 and totals.stop_missing_turns == 0, report.verdict_reasons
    assert STOPS_NEVER_TRAINED not in report.verdict_reasons, report.verdict_reasons
    guard = check_batch(rows, on_fail="return", tokenizer=tok)
    assert guard.ok and guard.complete, guard.not_checked
    # the environment's text in a message the template opens (``<|im_start|>user``): turns cut before their stop
    header = tok.convert_tokens_to_ids("<|im_start|>")
    headed = copy.deepcopy(rows)
    for r in headed:
        for k, t in enumerate(r["turns"][1:], start=1):
            at = len(t["prompt_ids"]) - 1  # the environment's last id, before the next turn
            r["input_ids"][at] = header
            for later in r["turns"][k:]:
                later["prompt_ids"][at] = header
    totals = replay_log(write_jsonl(tmp_path / "h.jsonl", headed), tito)
    report = build_report(totals, loaded, "log", {}).models[0]
    assert totals.stop_missing_turns > 10 and STOPS_NEVER_TRAINED in report.verdict_reasons, report.verdict_reasons
    guard = check_batch(headed, on_fail="return", tokenizer=tok)
    assert any(n.startswith("stop maybe not trained") for n in guard.not_checked), guard.not_checked


CUT_MODELS = [
    ("google/gemma-2-2b-it", None),  # <start_of_turn>: an added token the tokenizer's all_special_ids does not list
    ("microsoft/Phi-3-mini-4k-instruct", None),  # <|user|>
    ("mistralai/Mistral-Nemo-Instruct-2407", None),  # [INST]
    ("deepseek-ai/DeepSeek-V3", None),  # <｜User｜>: added, not special; its only header id is the BOS
    ("allenai/OLMo-2-1124-7B-Instruct", None),  # <|user|>: plain text
    # headers in prose (red team 59): Vicuna's USER:, DeepSeek-V2's User: after the BOS, Alpaca's ### Instruction:
    ("mistralai/Mistral-Nemo-Instruct-2407", "alpindale-WizardLM-2-8x22B.jinja"),
    ("mistralai/Mistral-Nemo-Instruct-2407", "deepseek-ai-DeepSeek-V2-Lite-Chat.jinja"),
    ("Qwen/Qwen2.5-7B-Instruct", "MTSAIR-multi_verse_model.jinja"),
]


def templated_episode(tok, stops, n: int, turns: int, cut: bool) -> dict:  # type: ignore[no-untyped-def]
    """A loop that renders with the template and trains each answer; ``cut``: each turn but the last logged
    without the stop the engine sampled, which is dropped from the trained ids and every later prompt too, so that
    the template's next message follows the turn directly."""
    msgs = []
    for k in range(turns):
        msgs += [{"role": "user", "content": f"Question {n}.{k}: {n}+{k}?"}]
        msgs += [{"role": "assistant", "content": f"{n + k}."}]
    full = tok.encode(tok.apply_chat_template(msgs, tokenize=False), add_special_tokens=False)
    spans = []
    for k in range(turns):
        head = tok.apply_chat_template(msgs[: 2 * k + 1], tokenize=False, add_generation_prompt=True)
        at = len(tok.encode(head, add_special_tokens=False))
        end = next(j for j in range(at, len(full)) if full[j] in stops) + 1
        spans.append((at, end))
    drop = {b - 1 for a, b in spans[:-1]} if cut else set()
    keep = [j for j in range(spans[-1][1]) if j not in drop]
    sampled = {j for a, b in spans for j in range(a, b)}
    turns_out = []
    for a, b in spans:
        ids = [full[j] for j in range(a, b) if j not in drop]
        turns_out.append({"ids": ids, "logprobs": [-0.25] * len(ids), "prompt_ids": [full[j] for j in keep if j < a]})
    mask = [int(j in sampled) for j in keep]
    return {"id": f"t{n}", "turns": turns_out, "input_ids": [full[j] for j in keep], "loss_mask": mask}


@pytest.mark.parametrize(("model", "template"), CUT_MODELS)
def test_the_stop_cut_before_the_template_s_next_message_is_named_a_stop_string_s_loop_not(
    loaded, model, template, tmp_path
):
    """Red team 57: reading a turn as cut before its stop only where a control id follows it named nothing for
    templates whose next message opens with a word the tokenizer does not mark special (the guard read
    ``all_special_ids``), or with plain text (OLMo-2's ``<|user|>``), or whose only header id is the BOS
    (DeepSeek-V3): a loop that drops the stop from every inner turn was exact, exit 0. Red team 59: nor for
    templates whose headers are prose (``USER:``, ``User:``, ``### Instruction:``), whose only turn word is the stop
    the loop cut. The template's next message is what it writes before the next message's payload (its control ids,
    its first line of text) or a word it opens or ends turns with, found in the ids; a stop string's loop
    (Search-R1's environment text, no header) is still not read as cut."""
    from tests.conftest import CORPUS
    from tito_audit.report.loop_verdict import STOPS_NEVER_TRAINED

    m = loaded(model)
    tok = m.tokenizer
    if template is not None:  # a corpus template, on a tokenizer that has what it writes
        text = (CORPUS / template).read_text()
        m = m.with_template(text, template)
        tok = copy.deepcopy(tok)
        tok.chat_template = text
    ctx = tito_only(m)
    stops = set(ctx.stop_ids)
    cases = {
        "correct": [templated_episode(tok, stops, n, 3 + n % 2, cut=False) for n in range(12)],
        "cut": [templated_episode(tok, stops, n, 3 + n % 2, cut=True) for n in range(12)],
    }
    for name, rows in cases.items():
        totals = replay_log(write_jsonl(tmp_path / f"{name}.jsonl", rows), ctx)
        report = build_report(totals, m, "log", {}).models[0]
        named = name == "cut"
        assert (STOPS_NEVER_TRAINED in report.verdict_reasons) is named, (name, report.verdict_reasons)
        for given in (tok, m):  # the tokenizer with the template, and the model (its template) as tokenizer=
            guard = check_batch(rows, on_fail="return", tokenizer=given)
            assert any(n.startswith("stop maybe not trained") for n in guard.not_checked) is named, guard.not_checked
            assert totals.diverged_episodes == 0 and guard.ok
    stop = tok.convert_tokens_to_ids(tok.convert_ids_to_tokens(ctx.stop_ids[0]))
    strings = []
    for row in (search_r1_episode(tok, n, 3 + n % 2) for n in range(12)):
        last = row["turns"][-1]  # the episode's answer ends on this model's stop
        at = len(last["prompt_ids"]) + len(last["ids"]) - 1
        last["ids"][-1] = row["input_ids"][at] = stop
        strings.append(row)
    totals = replay_log(write_jsonl(tmp_path / "r1.jsonl", strings), ctx)
    report = build_report(totals, m, "log", {}).models[0]
    assert totals.stop_missing_turns == 0 and STOPS_NEVER_TRAINED not in report.verdict_reasons, report.verdict_reasons
    for given in (tok, m):
        guard = check_batch(strings, on_fail="return", tokenizer=given)
        assert not any(n.startswith("stop maybe not trained") for n in guard.not_checked), guard.not_checked


def test_the_guard_s_reading_neither_keeps_the_tokenizer_alive_nor_fails_on_ids_it_cannot_decode(plays):
    """Review 58: the reading kept per tokenizer held a decode function that held the tokenizer (its weak-keyed
    cache kept its own key alive), and the ids after a turn were decoded unguarded: an id outside the vocabulary
    between two turns raised out of ``check_batch``, which had passed it."""
    import gc
    import weakref

    from transformers import AutoTokenizer

    from tests.conftest import snapshot
    from tito_audit.trainer.tokenizer_reading import tokenizer_reading

    tok = AutoTokenizer.from_pretrained(str(snapshot(QWEN)))
    stops, following = tokenizer_reading(tok)
    assert stops and following is not None and following.decode is None
    alive = weakref.ref(tok)
    rows = [search_r1_episode(tok, n, 3) for n in range(4)]
    for r in rows:
        gap = len(r["turns"][0]["prompt_ids"]) + len(r["turns"][0]["ids"])
        r["input_ids"][gap] = -1
        for later in r["turns"][1:]:
            later["prompt_ids"][gap] = -1
    found = check_batch(rows, on_fail="return", tokenizer=tok)
    assert found.ok and found.episodes == 4
    del tok, found
    gc.collect()
    assert alive() is None
