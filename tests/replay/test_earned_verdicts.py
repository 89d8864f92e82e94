"""Replay does not trust itself (issue 33, items 6-10): every "exact" and "safe" is earned, and what could not
be checked is named.

Logs are written by the tests from the audit's scenarios played through ``Trajectory``; the loops that are not
in ``tito_audit.testing.synthetic`` (a fixed-base delta loop, a date-printing template of our own, an
unrenderable message, a log from another tokenizer) are built here.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json

import pytest
from typer.testing import CliRunner

from tests.conftest import write_jsonl
from tito_audit import load
from tito_audit.cli import app
from tito_audit.replay import LogError, ReplayContext, build_report, replay_log
from tito_audit.replay.analyze import analyze
from tito_audit.replay.schema import episode_from_native
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.testing.synthetic import log_episode, played_episodes, with_engine_prompts
from tito_audit.trainer.guard import check_batch

QWEN = "Qwen/Qwen2.5-7B-Instruct"
ROLLOUT_DAY = dt.datetime(2026, 7, 26, 12, 0)  # the day the engine rendered; replay's default date is another

# ChatML with the date printed from the clock on every render (no variable can override it).
DATE_TEMPLATE = (
    "{%- for m in messages %}"
    "{%- if loop.first %}<|im_start|>system\nToday is {{ strftime_now('%Y-%m-%d') }}.<|im_end|>\n{%- endif %}"
    "{%- if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>\n{{ c.function | tojson }}\n</tool_call>{%- endfor %}"
    "<|im_end|>\n"
    "{%- elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)


def tokens_only(record):
    """What a Parquet or SkyRL dump keeps: ids, no messages."""
    return {k: record[k] for k in ("id", "turns", "input_ids", "loss_mask") if k in record}


@pytest.fixture(scope="module")
def qwen(plays):
    model, ctx, played = plays(QWEN, 0.3, 11)
    return model, ctx, played[:16]


# -- item 6: the engine's prompts are the reference; the template's rendering only measures drift ---------------


@pytest.fixture(scope="module")
def dated(tmp_path_factory):
    path = tmp_path_factory.mktemp("tpl") / "dated.jinja"
    path.write_text(DATE_TEMPLATE, encoding="utf-8")
    model = load(QWEN, chat_template_file=path)
    plays = played_episodes(model, 0.3, seed=2, date=ROLLOUT_DAY)
    assert plays, "the date template plays no scenario"
    return model, plays


def test_a_correct_loop_on_a_date_template_replayed_later_is_exact(dated, tmp_path):
    model, plays = dated
    ctx = ReplayContext.from_model(model)  # renders at the replay's date, not the rollout's
    assert ctx.renderer.date.date() != ROLLOUT_DAY.date()
    logged = [with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p, ROLLOUT_DAY) for p in plays]
    t = replay_log(write_jsonl(tmp_path / "dated.jsonl", logged), ctx)
    assert (t.diverged_turns, t.trained_not_sampled, t.sampled_not_trained, t.mask_flips) == (0, 0, 0, 0)
    assert t.episodes == len(plays) and t.reference_engine == len(plays) and ctx.dated
    # the logged date is used for every render: the template's rendering is the loop's, the what-if ran
    assert t.drift_episodes == len(plays) and t.drift_diverged == 0
    assert t.whatif_episodes == len(plays)
    # without the date in the log: still exact, and the date line is context drift of class `date`
    undated = [{k: v for k, v in r.items() if k != "date"} for r in logged]
    t = replay_log(write_jsonl(tmp_path / "undated.jsonl", undated), ctx)
    assert t.diverged_turns == 0 and t.drift_diverged == len(plays) and t.drift_by_class == {"date": len(plays)}
    report = build_report(t, model, "undated.jsonl", ctx.renderer.token_texts).models[0]
    assert report.check("replay_context_drift").status == "warn" and report.verdict != "unsafe"
    # drift never hides a real divergence: a trainer that re-tokenizes is still caught at its positions
    broken = [log_episode(p, "naive_retokenize", p.scenario.id) for p in plays]
    rows = [{k: v for k, v in with_engine_prompts(b.record, p).items()} for b, p in zip(broken, plays, strict=True)]
    t = replay_log(write_jsonl(tmp_path / "broken.jsonl", rows), ctx)
    want = sorted((n + 1, i.turn, i.index) for n, b in enumerate(broken) for i in b.truth)
    got = sorted((int(label.split()[1]), d.turn, d.index) for label, d in t.findings["replay_divergence"])
    assert want and got == want and set(t.by_class) == {"non_canonical"}


def fixed_base_record(p, renderer, stop_ids):
    """A valid TITO loop that renders each environment delta after a fixed base conversation (as SkyRL's
    generator does), not after the episode's own history; it logs the engine's prompts."""
    base = [{"role": "user", "content": "I am a user."}]
    tools = list(p.scenario.tools) or None
    msgs = p.messages
    assistants = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    buf = renderer.render_ids(msgs[: assistants[0]], tools=tools, add_generation_prompt=True)
    mask = [0] * len(buf)
    turns = []
    for n, idx in enumerate(assistants):
        ids = p.turns[n]
        turns.append({"ids": ids, "logprobs": p.logprobs[n], "prompt_ids": list(buf)})
        buf, mask = buf + ids, mask + [1] * len(ids)
        nxt = assistants[n + 1] if n + 1 < len(assistants) else len(msgs)
        if nxt > idx + 1:
            head = renderer.render_ids(base, tools=tools)
            full = renderer.render_ids(base + msgs[idx + 1 : nxt], tools=tools, add_generation_prompt=True)
            assert full[: len(head)] == head
            buf, mask = buf + full[len(head) :], mask + [0] * (len(full) - len(head))
    record = {"id": p.scenario.id, "messages": msgs, "turns": turns, "input_ids": buf, "loss_mask": mask}
    if tools:
        record["tools"] = tools
    return record


def test_a_fixed_base_delta_loop_is_exact_and_its_context_drift_is_placed(qwen, tmp_path):
    model, ctx, plays = qwen
    plays = [p for p in plays if len(p.turns) > 1 and not p.refusals and not p.scenario.kwargs]
    rows = [fixed_base_record(p, ctx.renderer, ctx.stop_ids) for p in plays]
    differs = [n for n, (r, p) in enumerate(zip(rows, plays, strict=True)) if r["input_ids"] != p.traj.input_ids]
    assert differs, "the fixed-base deltas equal the in-place ones on every episode: nothing would be tested"
    t = replay_log(write_jsonl(tmp_path / "fixed.jsonl", rows), ctx)
    assert (t.diverged_turns, t.trained_not_sampled, t.sampled_not_trained, t.mask_flips) == (0, 0, 0, 0)
    assert t.episodes == len(rows) and t.reference_engine == len(rows)
    assert t.drift_diverged == len(differs)
    # each episode's first drift sits where its context first departs from the template's buffer
    first = {int(label.split()[1]): d for label, d in reversed(t.findings["replay_context_drift"])}
    for n in differs:
        want = common_prefix_len(rows[n]["input_ids"], plays[n].traj.input_ids)
        assert first[n + 1].index == want, plays[n].scenario.id
    report = build_report(t, model, "fixed.jsonl", ctx.renderer.token_texts).models[0]
    assert report.verdict != "unsafe" and report.check("replay_divergence").status == "pass"


# -- item 7: an episode that could not be checked is counted, named and never passes -----------------------------


def test_an_unrenderable_episode_is_incomplete_in_every_format(qwen, tmp_path):
    _, ctx, plays = qwen
    with_tool = next(n for n, p in enumerate(plays) if any(m["role"] == "tool" for m in p.messages))
    rows = [log_episode(p, "correct", p.scenario.id).record for p in plays[:4]]
    huge = log_episode(plays[with_tool], "correct", "huge").record
    for m in huge["messages"]:
        if m["role"] == "tool":
            m["content"] = "x" * 3_000_000  # over the render limit (2M characters)
    rows.append(huge)
    path = write_jsonl(tmp_path / "huge.jsonl", rows)
    runner = CliRunner()
    res = runner.invoke(app, ["replay", str(path), "-m", QWEN, "-w", "1", "-q"])
    assert res.exit_code == 3, res.output
    t = replay_log(path, ctx)
    assert t.reference_errors == 1 and t.episodes == 5
    assert [label for label, _ in t.findings["replay_incomplete"]] == ["line 5 (huge)"]
    for fmt in ("terminal", "json", "markdown", "html", "sarif"):
        res = runner.invoke(app, ["replay", str(path), "-m", QWEN, "-w", "1", "-f", fmt, "-v"])
        assert res.exit_code == 3, (fmt, res.output)
        assert "line 5 (huge)" in res.stdout and "replay_incomplete" in res.stdout, fmt
        assert "1 of 5 episode(s) not checked" in res.stderr
    doc = json.loads(runner.invoke(app, ["replay", str(path), "-m", QWEN, "-w", "1", "-f", "json"]).stdout)
    assert doc["models"][0]["verdict"] != "safe"
    assert "error:replay_divergence:incomplete" in doc["models"][0]["verdict_reasons"]


def test_a_log_whose_every_record_is_malformed_exits_2(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"input_ids": [1, 2]}\n{oops\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["replay", str(path), "-m", QWEN, "-w", "1", "-q"])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1
    assert "every one of 2 record(s) is malformed" in res.stderr


# -- item 8: the verdict follows the audit's rule ---------------------------------------------------------------


def test_safe_needs_a_what_if_that_ran_and_was_exact(loaded, tmp_path):
    model = loaded(QWEN)
    ctx = ReplayContext.from_model(model)
    canonical = [p for p in played_episodes(model, 0.0, seed=4) if p.scenario.id.endswith("/plain")][:8]
    assert canonical

    def verdict(rows):
        t = replay_log(write_jsonl(tmp_path / "v.jsonl", rows), ctx)
        m = build_report(t, model, "v.jsonl", ctx.renderer.token_texts).models[0]
        return m.verdict, m.verdict_reasons, m.verdict_explanation

    full = [log_episode(p, "correct", p.scenario.id).record for p in canonical]
    v, reasons, _ = verdict(full)
    assert (v, reasons) == ("safe", []), reasons  # what-if on every episode, exact; no split sampled
    # the same loop logged without messages (a Parquet or SkyRL dump): no what-if ran, so not safe, and said so
    v, reasons, why = verdict([tokens_only(r) for r in full])
    assert v == "tito-required"
    assert reasons == ["error:replay_divergence:turns_only", "error:replay_naive_what_if:compared_nothing"]
    assert "naive re-tokenization was not checked" in why
    # non-canonical samples prove that re-tokenization diverges, what-if or not
    split = played_episodes(model, 1.0, seed=4)[:8]
    v, reasons, why = verdict([tokens_only(log_episode(p, "correct", p.scenario.id).record) for p in split])
    assert v == "tito-required" and "tito-required:replay_noncanonical" in reasons
    assert "naive re-tokenization would not be" in why


# -- item 9: a log from another tokenizer is refused in one line ------------------------------------------------


def test_a_log_from_another_tokenizer_is_refused(qwen, tmp_path):
    _, _, plays = qwen
    rows = [log_episode(p, "correct", p.scenario.id).record for p in plays]
    path = write_jsonl(tmp_path / "qwen.jsonl", rows)
    runner = CliRunner()
    res = runner.invoke(app, ["replay", str(path), "-m", "openai/gpt-oss-20b", "-w", "1", "-q"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "another model's tokenizer" in lines[0] and "openai/gpt-oss-20b" in lines[0]
    # an id no tokenizer of this size has: that record is malformed, named, the others replayed (exit 3)
    bad = json.loads(json.dumps(rows[0]))
    bad["turns"][0]["ids"][0] = 999_999_999
    path = write_jsonl(tmp_path / "oov.jsonl", [*rows[1:], bad])
    res = runner.invoke(app, ["replay", str(path), "-m", QWEN, "-w", "1", "-q"])
    assert res.exit_code == 3 and "999999999" in res.stderr and f"line {len(rows)}" in res.stderr
    # every record out of the vocabulary: nothing replayed, the mismatch is named (exit 2)
    res = runner.invoke(app, ["replay", str(write_jsonl(tmp_path / "all.jsonl", [bad] * 3)), "-m", QWEN, "-w", "1"])
    assert res.exit_code == 2 and "outside Qwen/Qwen2.5-7B-Instruct's tokenizer" in res.stderr


# -- item 10: a doubled BOS, and a mask divergence at the first sampled token whose mask is wrong ---------------


def test_a_doubled_bos_is_found_without_messages(loaded):
    model = loaded("meta-llama/Llama-3.2-3B-Instruct")
    ctx = ReplayContext.from_model(model)
    bos = model.tokenizer.bos_token_id
    for p in played_episodes(model, 0.0, seed=1)[:6]:
        rec = tokens_only(log_episode(p, "correct", "").record)
        assert rec["input_ids"][0] == bos
        rec["input_ids"] = [bos, *rec["input_ids"]]  # rendered text re-encoded with the special tokens added
        rec["loss_mask"] = [0, *rec["loss_mask"]]
        res = analyze(episode_from_native(rec, 1), ctx)
        assert [(d.turn, d.index, d.cls) for d in res.divergences] == [(0, 1, "special_token")]
    assert bos in ctx.bos_ids


def test_a_late_mask_is_placed_at_its_first_sampled_token(qwen):
    _, ctx, plays = qwen
    checked = 0
    for p in plays:
        rec = tokens_only(log_episode(p, "correct", "").record)
        spans = p.traj.sampled_spans()
        k = len(spans) - 1
        a, b = spans[k]
        if b - a < 2:
            continue
        rec["loss_mask"][a] = 0  # the mask starts one token late
        res = analyze(episode_from_native(rec, 1), ctx)
        assert [(d.turn, d.index, d.kind) for d in res.divergences] == [(k, a, "mask")], p.scenario.id
        guard = check_batch([{"sampled": [t["ids"] for t in rec["turns"]], **rec}], on_fail="return")
        assert guard.first is not None and guard.first.divergence.index == a
        checked += 1
    assert checked


def test_gz_log_of_another_tokenizer_is_refused_before_the_whole_log_is_read(qwen, tmp_path):
    """The fit is decided on the first episodes: a long log of another tokenizer ends in one line, early."""
    _, _, plays = qwen
    rows = [log_episode(p, "correct", p.scenario.id).record for p in plays] * 40
    path = tmp_path / "long.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    seen: list[int] = []
    gpt = load("openai/gpt-oss-20b")
    with pytest.raises(LogError, match="another model's tokenizer"):
        replay_log(path, ReplayContext.from_model(gpt, False), on_records=seen.append)
    assert sum(seen) < len(rows)


def test_a_message_after_the_last_turn_is_neither_divergence_nor_drift(qwen):
    """A final environment message kept untrained after the last sampled turn changes no gradient, and the engine
    never saw it: with engine prompts it is no divergence and no drift."""
    _, ctx, plays = qwen
    p = next(p for p in plays if p.messages[-1]["role"] == "assistant")
    rec = with_engine_prompts(log_episode(p, "correct", "").record, p)
    rec["messages"].append({"role": "user", "content": "Thanks."})
    tail = ctx.renderer.encode("\n<|im_start|>user\nThanks.<|im_end|>\n")
    rec["input_ids"] += tail
    rec["loss_mask"] += [0] * len(tail)
    res = analyze(episode_from_native(rec, 1), ctx)
    assert res.reference == "engine" and res.divergences == [] and res.drift == []
