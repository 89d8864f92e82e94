"""Environment tokens logged as sampled are trained tokens the policy never sampled (issue 38, item 2).

The loop here glues the environment's delta (the tool result or user message the template renders between two
turns) to the front of the next turn's sampled ids, logs it with log-prob 0.0, trains it, and logs the next turn's
``prompt_ids`` as ending where the previous turn's ids end: the engine's prompts, the sampled turns and the trained
sequence agree, so the TITO check alone calls the loop exact. Replay must call it unsafe at the first glued id,
from the template's render of the message, and from the impossible log-probs when renders are off (``--only-tito``).
The episodes are the audit's scenarios on the shared Qwen2.5 and Llama 3.2 tokenizers and templates.
"""

from __future__ import annotations

import copy

import pytest

from tests.conftest import write_jsonl
from tests.replay.conftest import QWEN
from tito_audit.replay import ReplayContext, build_report, replay_log
from tito_audit.replay.analyze import analyze
from tito_audit.replay.environment import message_renderings, rendered_in_turns
from tito_audit.replay.schema import episode_from_native
from tito_audit.report.loop_verdict import ENVIRONMENT_STOPS_ONLY
from tito_audit.testing.synthetic import log_episode, with_engine_prompts

LLAMA = "meta-llama/Llama-3.2-3B-Instruct"


def tito_only(loaded) -> ReplayContext:  # type: ignore[no-untyped-def]
    """The replay context of ``--only-tito``: no renders, so only the ids and log-probs are evidence."""
    return ReplayContext.from_model(loaded, False, drift=False, noncanonical=False)


def glued(p, fill: float | None = 0.0) -> tuple[dict, int | None]:
    """The record of the loop above for episode ``p``, and the first glued position (None: nothing to glue)."""
    record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
    spans = p.traj.sampled_spans()
    mask = list(record["loss_mask"])
    first = None
    for k in range(1, len(spans)):
        a, b = spans[k - 1][1], spans[k][0]
        gap = list(p.traj.input_ids[a:b])
        turn = record["turns"][k]
        turn["ids"] = gap + turn["ids"]
        if fill is None:
            turn["logprobs"] = None
        else:
            turn["logprobs"] = [fill] * len(gap) + turn["logprobs"]
        turn["prompt_ids"] = list(p.traj.input_ids[:a])
        mask[a:b] = [1] * len(gap)
        first = a if first is None else first
    record["loss_mask"] = mask
    if fill is None:
        for t in record["turns"]:
            if t.get("logprobs") is None:
                del t["logprobs"]
    return record, first


@pytest.mark.parametrize("model", [QWEN, LLAMA])
def test_a_tool_result_glued_into_the_next_turn_is_unsafe_at_its_first_id(plays, model, tmp_path):
    loaded, ctx, played = plays(model, 0.0, 5)
    rows, firsts = [], {}
    for p in played:
        record, first = glued(p)
        if first is not None:
            rows.append(record)
            firsts[p.scenario.id] = first
    assert len(rows) > 10
    for render_ctx in (ctx, tito_only(loaded)):
        for n, record in enumerate(rows):
            res = analyze(episode_from_native(copy.deepcopy(record), n), render_ctx)
            first = res.divergences[0]
            assert (first.index, first.cls, first.kind) == (firsts[record["id"]], "environment", "environment"), (
                record["id"],
                first,
            )
            assert "environment tokens logged as sampled" in first.message
            assert res.trained_not_sampled > 0
    totals = replay_log(write_jsonl(tmp_path / "log.jsonl", rows), ctx)
    report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
    assert report.verdict == "unsafe"
    assert totals.by_class["environment"] == totals.diverged_turns == sum(len(r["turns"]) - 1 for r in rows)


def test_the_template_render_names_it_without_impossible_log_probs(plays):
    """Log-probs that look real on the glued ids (the logger copied the next turn's): the render alone names it."""
    _loaded, ctx, played = plays(QWEN, 0.0, 5)
    found = 0
    for n, p in enumerate(played):
        record, first = glued(p, fill=-0.25)
        if first is None:
            continue
        ep = episode_from_native(record, n)
        res = analyze(ep, ctx)
        assert res.divergences and res.divergences[0].cls == "environment"
        # the stop inside the turn names it from the ids too; the render evidence holds on its own
        renderings = message_renderings(ep, ctx.renderer)
        held = rendered_in_turns(ep, renderings, ctx.control_ids, frozenset(ctx.stop_ids), ctx.decode)
        assert held and "rendering of message" in held[0].why
        found += 1
    assert found > 10


def test_a_turn_without_log_probs_among_turns_with_them(plays):
    """The glued turn carries no log-probs while the others do: named without renders."""
    loaded, _ctx, played = plays(QWEN, 0.0, 5)
    no_renders = tito_only(loaded)
    checked = 0
    for n, p in enumerate(played):
        record, first = glued(p, fill=None)
        if first is None:
            continue
        res = analyze(episode_from_native(record, n), no_renders)
        assert res.divergences[0].cls == "environment", res.divergences
        assert "no log-probs while the other turns have" in res.divergences[0].message
        checked += 1
    assert checked > 10


def test_no_environment_finding_on_a_correct_loop_whose_turns_begin_with_certain_tokens(plays):
    """A confident model's first log-probs round to exactly 0.0: without a header token there, that is no evidence,
    and a correct loop stays exact on every scenario."""
    loaded, ctx, played = plays(QWEN, 0.0, 5)
    no_renders = tito_only(loaded)
    for n, p in enumerate(played):
        record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
        for turn in record["turns"]:
            turn["logprobs"][: min(3, len(turn["logprobs"]) - 1)] = [0.0] * min(3, len(turn["logprobs"]) - 1)
        for c in (ctx, no_renders):
            res = analyze(episode_from_native(copy.deepcopy(record), n), c)
            assert not res.divergences, (p.scenario.id, res.divergences)
    assert ctx.header_ids and not ctx.header_ids & set(ctx.stop_ids)


QWEN3 = "Qwen/Qwen3-0.6B"


@pytest.mark.parametrize("fill", [-0.25, None, 0.0])
def test_a_history_rewriting_template_does_not_hide_it(plays, fill):
    """Found by an outside tester: on Qwen3, whose template drops an earlier turn's think block once a tool result
    follows, the render of the glued message is never found in one run, and with log-probs that look real (or none
    anywhere, or all 0.0) replay called 37 of 60 such loops exact. A stop token inside a sampled turn, beside the
    next message's header, names it from the ids alone: every glued episode is unsafe at its first glued id."""
    loaded, _ctx, played = plays(QWEN3, 0.0, 5)
    no_renders = tito_only(loaded)
    checked = 0
    for n, p in enumerate(played):
        record, first = glued(p, fill=fill)
        if first is None:
            continue
        if fill is None:  # no log-probs anywhere in the episode: the log-probs say nothing
            for t in record["turns"]:
                t.pop("logprobs", None)
        res = analyze(episode_from_native(record, n), no_renders)
        assert res.divergences and res.divergences[0].cls == "environment", (p.scenario.id, res.divergences)
        assert res.divergences[0].index == first, (p.scenario.id, res.divergences[0])
        checked += 1
    assert checked > 30


def test_with_neither_messages_nor_log_probs_the_ids_are_named_as_the_only_evidence(plays, tmp_path):
    """The readings of the ids (a stop inside a turn, a turn opening with a message) are the evidence left without
    messages and log-probs, and they see nothing of a delta glued after a turn cut before its stop: such episodes
    are named (never a clean pass), and only they."""
    loaded, ctx, played = plays(QWEN, 0.0, 5)
    bare, with_logprobs = [], []
    for p in played:
        record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
        with_logprobs.append({k: v for k, v in record.items() if k != "messages"})
        bare.append(copy.deepcopy(with_logprobs[-1]))
        for turn in bare[-1]["turns"]:
            del turn["logprobs"]
    rendered = [log_episode(p, "correct", p.scenario.id).record for p in played]  # messages, no engine prompts
    for n, (rows, named) in enumerate(((bare, True), (with_logprobs, False), (rendered, False))):
        totals = replay_log(write_jsonl(tmp_path / f"log{n}.jsonl", rows), ctx)
        report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
        assert totals.checked_episodes == len(rows) > 10
        assert totals.environment_stops_only == (len(rows) if named else 0)
        assert (ENVIRONMENT_STOPS_ONLY in report.verdict_reasons) is named
        if named:
            assert report.verdict == "tito-required"
            assert "only in the ids, at a stop token inside a turn" in report.verdict_explanation


MISTRAL = "mistralai/Mistral-Nemo-Instruct-2407"


@pytest.mark.parametrize("fill", [-0.25, None])
def test_a_delta_without_a_stop_glued_with_real_log_probs_is_named_from_the_ids(plays, fill):
    """Red team 47: Mistral's user and tool-result deltas (``[INST]...[/INST]``, ``[TOOL_RESULTS]...[/TOOL_RESULTS]``)
    hold no stop token; glued to the next turn with log-probs that look real (an actor's recomputed ones) or none
    at all, and replayed without renders (``--only-tito``) or messages, the turn opening with a message names it at
    its first id. Before, the loop was called exact."""
    loaded, _ctx, played = plays(MISTRAL, 0.0, 5)
    no_renders = tito_only(loaded)
    assert no_renders.openings  # a user message's and a tool result's
    checked = 0
    for n, p in enumerate(played):
        record, first = glued(p, fill=fill)
        if first is None:
            continue
        record = {k: v for k, v in record.items() if k != "messages"}
        if fill is None:  # no log-probs anywhere: nothing but the ids
            for t in record["turns"]:
                t.pop("logprobs", None)
        res = analyze(episode_from_native(record, n), no_renders)
        assert res.divergences, p.scenario.id
        d = res.divergences[0]
        assert (d.index, d.cls) == (first, "environment"), (p.scenario.id, d)
        checked += 1
    assert checked > 10


def test_a_correct_mistral_loop_has_no_turn_opening_with_a_message(plays):
    """The same episodes logged by a correct loop (each turn's ids as sampled): no environment finding, with
    renders or without."""
    loaded, ctx, played = plays(MISTRAL, 0.0, 5)
    for n, p in enumerate(played):
        record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
        for c in (ctx, tito_only(loaded)):
            res = analyze(episode_from_native(copy.deepcopy(record), n), c)
            assert not res.divergences, (p.scenario.id, res.divergences)


@pytest.mark.parametrize("model", [LLAMA, "openai/gpt-oss-20b"])
def test_a_policy_that_writes_its_own_assistant_header_is_no_environment(loaded, model, tmp_path):
    """Red team 50: a loop that renders each prompt without the generation prompt has the policy write the
    assistant's opening itself (Llama's ``<|start_header_id|>assistant<|end_header_id|>``, harmony's
    ``<|start|>assistant``, and harmony's ``<|start|>`` again between channels). A correct log: the ids that open
    an assistant turn are no message header, and nothing is called environment tokens."""
    m = loaded(model)
    tok = m.tokenizer
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."},
            {"role": "user", "content": "And now?"}, {"role": "assistant", "content": "Still here."}]  # fmt: skip
    answers = (1, 3)
    if "gpt-oss" in model:  # one answer with its analysis channel: the policy writes <|start|> between channels
        msgs, answers = [msgs[0], {**msgs[1], "thinking": "The user greets me."}], (1,)

    def ids(ms):  # type: ignore[no-untyped-def]
        out = tok.apply_chat_template(ms, tokenize=True, return_dict=False, chat_template=m.chat_template)
        return list(out["input_ids"] if isinstance(out, dict) else out)

    full, turns, mask = ids(msgs), [], [0] * len(ids(msgs))
    for i in answers:
        p, q = ids(msgs[:i]), ids(msgs[: i + 1])
        assert full[: len(q)] == q and q[: len(p)] == p  # the template is prefix-preserving here
        turns.append({"ids": q[len(p) :], "logprobs": [-0.1] * (len(q) - len(p)), "prompt_ids": p})
        mask[len(p) : len(q)] = [1] * (len(q) - len(p))
    record = {"id": "own-header", "turns": turns, "input_ids": full, "loss_mask": mask}
    ctx = tito_only(m)
    res = analyze(episode_from_native(record, 0), ctx)
    assert not [d for d in res.divergences if d.cls == "environment"], res.divergences


def tail_glued(p, fill: float) -> dict | None:
    """The loop that cuts each non-final turn before its stop and glues the environment's message to its end, up to
    and including that message's own stop (so the turn's one stop is its last id), logged with log-prob ``fill``;
    the engine's next prompt adds only the next turn's opener. None where the template gives no such turn."""
    record = log_episode(p, "correct", p.scenario.id).record
    spans = p.traj.sampled_spans()
    stop = p.turns[0][-1] if p.turns and p.turns[0] else None
    ids_all = list(p.traj.input_ids)
    seq, mask = ids_all[: spans[0][0]], [0] * spans[0][0]
    prompt, turns, glued = list(seq), [], 0
    for k, ((a, b), turn) in enumerate(zip(spans, record["turns"], strict=True)):
        ids, lps = list(ids_all[a:b]), list(turn["logprobs"])
        rest: list[int] = []
        if k + 1 < len(spans):
            gap = ids_all[b : spans[k + 1][0]]
            if ids and ids[-1] == stop and stop in gap:
                j = gap.index(stop)
                ids, lps = ids[:-1] + gap[: j + 1], lps[:-1] + [fill] * (j + 1)
                rest, glued = gap[j + 1 :], glued + 1
            else:
                rest = gap
        turns.append({"ids": ids, "logprobs": lps, "prompt_ids": list(prompt)})
        seq, mask = seq + ids + rest, mask + [1] * len(ids) + [0] * len(rest)
        prompt = prompt + ids + rest
    if not glued:
        return None
    end = len(prompt) - len(rest)
    return {**record, "turns": turns, "input_ids": seq[:end], "loss_mask": mask[:end]}


def test_a_message_glued_after_a_turn_cut_before_its_stop_is_named_by_its_trailing_log_probs(plays):
    """Found by a red team: the turn's one stop is its last id (the glued message's own), so the stop reading sees
    nothing, and real log-probs on the rest of the turn made the episode count as checked by log-probs: "the loop
    is exact on these episodes". A trailing run of 0.0 over a header token is the leading run's mirror."""
    loaded, _ctx, played = plays(QWEN, 0.0, 5)
    no_renders = tito_only(loaded)
    checked = 0
    for n, p in enumerate(played):
        record = tail_glued(p, 0.0)
        if record is None:
            continue
        record.pop("messages")
        res = analyze(episode_from_native(record, n), no_renders)
        assert res.divergences and res.divergences[0].cls == "environment", (p.scenario.id, res.divergences)
        assert "last" in res.divergences[0].message and "log-prob 0.0" in res.divergences[0].message
        checked += 1
    assert checked > 10


def test_log_probs_that_are_all_fill_values_are_no_evidence(plays, tmp_path):
    """Every log-prob exactly 0.0 (what a logger writes with a 0.0 fill) says nothing: the episode is named as
    looked at by its stops only, as one without log-probs."""
    loaded, ctx, played = plays(QWEN, 0.0, 5)
    rows = []
    for p in played:
        record = with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p)
        record.pop("messages")
        for turn in record["turns"]:
            turn["logprobs"] = [0.0] * len(turn["ids"])
        rows.append(record)
    totals = replay_log(write_jsonl(tmp_path / "zeros.jsonl", rows), ctx)
    report = build_report(totals, loaded, "log", ctx.renderer.token_texts).models[0]
    assert totals.environment_stops_only == totals.checked_episodes == len(rows) > 10
    assert ENVIRONMENT_STOPS_ONLY in report.verdict_reasons


def test_trailing_zeros_are_no_evidence_where_the_policy_writes_a_header_itself_or_none_is_in_them(plays):
    """Harmony's policy writes ``<|start|>`` between its channels, where a confident model's structural tokens may
    round to 0.0: a header the policy wrote with a real log-prob elsewhere in the episode makes trailing zeros over
    one no evidence. Trailing zeros over no header are none either."""
    from tito_audit.replay.environment import zero_logprob_turns

    _loaded, ctx, played = plays(QWEN, 0.0, 5)
    header = frozenset(ctx.header_ids)
    checked = 0
    for n, p in enumerate(played):
        record = tail_glued(p, 0.0)
        if record is None:
            continue
        assert zero_logprob_turns(episode_from_native(copy.deepcopy(record), n), header)  # the loop above: found
        first = record["turns"][0]
        k = next(i for i, t in enumerate(first["ids"]) if t in header)  # turn 0's glued header, now "sampled"
        first["logprobs"][k] = -0.3
        assert not [r for r in zero_logprob_turns(episode_from_native(record, n), header) if r.turn != 0]
        checked += 1
    assert checked > 10
    correct = with_engine_prompts(log_episode(played[0], "correct", "c").record, played[0])
    for turn in correct["turns"]:
        turn["logprobs"][-3:] = [0.0] * len(turn["logprobs"][-3:])  # a confident end: its stop, no header
    assert zero_logprob_turns(episode_from_native(correct, 0), header) == []
