"""Replay never calls exact, pass or safe what it did not compare: the red-team's replay reproducers (r3, r7, r8,
r10, r13 on branch ``redteam-logs``) and what a second look at the reworked replay found (prompts logged for some
turns only, the Arrow check against the JSONL reader, bad options and fields).

Logs are written here from the audit's scenarios played through ``Trajectory`` on the shared Qwen2.5 tokenizer.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from tests.conftest import write_jsonl
from tests.replay.conftest import cli, report_of
from tito_audit.replay import ReplayContext, build_report, replay_log
from tito_audit.replay.aggregate import MAX_FINDINGS
from tito_audit.replay.analyze import MARK_WINDOW, analyze
from tito_audit.replay.schema import episode_from_native
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.testing.synthetic import log_episode, played_episodes, with_engine_prompts

QWEN = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def qwen(plays):
    return plays(QWEN, 1.0, 3)


def verdict_of(t, model, ctx):
    m = build_report(t, model, "log", ctx.renderer.token_texts).models[0]
    return m.verdict, m.verdict_reasons, m.verdict_explanation


# -- r3: the engine sampled in a context the trainer does not train in ------------------------------------------


def reencoded_engine(p):
    """A loop whose engine is given each turn's prompt as a chat server builds it (render the chat so far, encode
    it), while the trainer trains the token buffer (``p.traj``): off-policy wherever a split was sampled."""
    tools = list(p.scenario.tools) or None
    rec = log_episode(p, "correct", p.scenario.id).record
    assistants = [i for i, m in enumerate(p.messages) if m["role"] == "assistant"]
    for turn, i in zip(rec["turns"], assistants, strict=True):
        turn["prompt_ids"] = p.renderer.encode(
            p.renderer.render(p.messages[:i], tools=tools, add_generation_prompt=True)
        )
    return rec


def test_an_engine_given_a_reencoded_history_is_found_where_its_prompt_departs(qwen):
    """r3: the engine's prompts are compared (every turn logged), and also when only some turns log them."""
    _, ctx, plays = qwen
    tito = dataclasses.replace(ctx, whatif=False, drift=False, noncanonical=False)
    checked = 0
    for p in plays:
        rec = reencoded_engine(p)
        trained = rec["input_ids"]
        departs = [
            (k, common_prefix_len(t["prompt_ids"], trained))
            for k, t in enumerate(rec["turns"])
            if trained[: len(t["prompt_ids"])] != t["prompt_ids"]
        ]
        if not departs:
            continue
        for partial in (False, True):
            row = copy.deepcopy(rec)
            logged = dict(departs)
            if partial:  # some turns do not log their prompt: the reference is then the template's buffer
                if len(logged) == len(row["turns"]):
                    logged.pop(0)
                if not logged:
                    continue
                for k, t in enumerate(row["turns"]):
                    if k not in logged:
                        del t["prompt_ids"]
            first = min(logged.values())
            res = analyze(episode_from_native(row, 1), tito)
            assert res.reference == ("buffer" if partial else "engine")
            assert res.divergences and min(d.index for d in res.divergences) == first, (p.scenario.id, partial)
            # the first prompt is the engine's buffer itself: a later prompt that departs is the engine's context
            if partial or departs[0][0] > 0:
                assert any(d.kind == "context" and d.index == first for d in res.divergences), p.scenario.id
        checked += 1
    assert checked >= 3


# -- r7: SkyRL keeps no sampled ids: nothing is compared, nothing is exact --------------------------------------


def test_a_skyrl_log_is_never_exact(qwen, tmp_path):
    _, _, plays = qwen
    rows = []
    for p in plays[:4]:
        rec = log_episode(p, "correct", p.scenario.id).record
        start = rec["loss_mask"].index(1)
        row = {"id": p.scenario.id, "prompt_ids": rec["input_ids"][:start]}
        row.update(response_ids=rec["input_ids"][start:], loss_mask=rec["loss_mask"][start:])
        rows.append(row)
        # a loop that trained '!' in place of every sampled id: SkyRL's log cannot tell
        garbage = [0 if m else i for i, m in zip(row["response_ids"], row["loss_mask"], strict=True)]
        rows.append(dict(row, id=f"{p.scenario.id}-garbage", response_ids=garbage))
    res = cli(write_jsonl(tmp_path / "skyrl.jsonl", rows), "-f", "json")
    assert res.exit_code == 3, res.output
    m = report_of(res)
    assert m["verdict"] == "error" and m["replay"]["reference_errors"] == len(rows)
    checks = {c["id"]: c for c in m["checks"]}
    assert checks["replay_divergence"]["status"] == "not_applicable"
    assert len(checks["replay_incomplete"]["findings"]) == len(rows)
    assert "SkyRL" in checks["replay_incomplete"]["findings"][0]["message"]
    assert "exact" not in m["verdict_explanation"]


# -- r8: nothing sampled, or no loss mask -----------------------------------------------------------------------


def test_a_log_without_sampled_turns_compares_nothing(qwen, tmp_path):
    _, _, plays = qwen
    rows = []
    for p in plays[:3]:
        rec = log_episode(p, "correct", p.scenario.id).record
        rows.append(
            {"id": rec["id"], "turns": [], "input_ids": rec["input_ids"], "loss_mask": [0] * len(rec["input_ids"])}
        )
    # messages without an assistant turn, and no turn: no traceback, the episode is named
    rows.append(
        {
            "id": "no-assistant",
            "messages": [{"role": "user", "content": "Hi"}],
            **{k: rows[0][k] for k in ("turns", "input_ids", "loss_mask")},
        }
    )
    res = cli(write_jsonl(tmp_path / "empty.jsonl", rows), "-f", "json")
    assert res.exit_code == 3, res.output
    m = report_of(res)
    checks = {c["id"]: c for c in m["checks"]}
    assert checks["replay_divergence"]["status"] == "not_applicable" and m["verdict"] == "error"
    assert [f["scenario"] for f in checks["replay_incomplete"]["findings"]][-1] == "line 4 (no-assistant)"
    # an episode with nothing sampled but trained ids is no "not checked": it trains what it never sampled
    trained = dict(rows[0], loss_mask=[1] * len(rows[0]["input_ids"]))
    res = cli(write_jsonl(tmp_path / "trained.jsonl", [trained]), "-q")
    assert res.exit_code == 1 and "UNSAFE" in res.stdout


def test_without_a_loss_mask_the_loop_is_not_called_exact(loaded, tmp_path):
    """Canonical samples, messages (the what-if runs, exact) and no loss_mask: which ids were trained is unknown,
    so the verdict is not safe and says why (main said SAFE)."""
    model = loaded(QWEN)
    ctx = ReplayContext.from_model(model)
    canonical = [p for p in played_episodes(model, 0.0, seed=4) if p.scenario.id.endswith("/plain")][:6]
    rows = [log_episode(p, "correct", p.scenario.id).record for p in canonical]
    unmasked = [{k: v for k, v in r.items() if k != "loss_mask"} for r in rows]
    t = replay_log(write_jsonl(tmp_path / "nomask.jsonl", unmasked), ctx)
    assert t.whatif_episodes == len(rows) and t.whatif_diverged == 0 and t.noncanonical_turns == 0
    assert t.unmasked_episodes == len(rows)
    verdict, reasons, why = verdict_of(t, model, ctx)
    assert verdict == "tito-required" and reasons == ["error:replay_divergence:no_loss_mask"]
    assert "which ids were trained was not checked" in why and "loop is exact" not in why
    assert verdict_of(replay_log(write_jsonl(tmp_path / "mask.jsonl", rows), ctx), model, ctx)[0] == "safe"


# -- r10: findings past the first 200 still count for the status, the gate and the verdict ----------------------


def test_findings_past_the_kept_ones_are_not_hidden_by_a_suppression(qwen, tmp_path):
    _, _, plays = qwen
    base = log_episode(plays[0], "correct", "").record
    broken = copy.deepcopy(base)
    broken["input_ids"][broken["loss_mask"].index(1)] = 0  # the trainer trains '!' where a sampled id was
    rows = [dict(broken, id=f"eval-{k}") for k in range(MAX_FINDINGS)] + [
        dict(broken, id=f"train-{k}") for k in range(5)
    ]
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    toml = tmp_path / "tito-audit.toml"
    toml.write_text('[[suppress]]\ncheck = "replay_divergence"\nscenario = "*(eval-*"\nreason = "eval rollouts"\n')
    res = cli(log, "--suppressions", toml, "-f", "json")
    assert res.exit_code == 1, res.output
    m = report_of(res)
    div = next(c for c in m["checks"] if c["id"] == "replay_divergence")
    assert div["status"] == "fail" and m["verdict"] == "unsafe"
    active = [f for f in div["findings"] if not f.get("suppressed")]
    assert [f["scenario"] for f in active] == [f"5 more past the first {MAX_FINDINGS}"]
    assert "line 201 (train-0)" in active[0]["message"]
    # a baseline holding the first 200 findings does not cover the later ones either
    res = cli(log, "-f", "json", "-o", tmp_path / "all.json")
    first = copy.deepcopy(json.loads((tmp_path / "all.json").read_text()))
    for c in first["models"][0]["checks"]:
        c["findings"] = [f for f in c["findings"] if "more past" not in f["scenario"]]
    (tmp_path / "base.json").write_text(json.dumps(first))
    res = cli(log, "--baseline", tmp_path / "base.json", "-q")
    assert res.exit_code == 1 and "5 more past the first" in res.stderr
    # the count merges across the parts of a log (workers, Ray) as if kept in one place
    ctx = ReplayContext.from_model(qwen[0], False, drift=False, noncanonical=False)
    one, two = replay_log(log, ctx), replay_log(log, ctx, workers=2)
    assert one.omitted == two.omitted == {"replay_divergence": {"history_rewrite": 5}}
    assert one.first_omitted == two.first_omitted


# -- r13: an unrenderable message: incomplete, and the what-if says why it did not run --------------------------


def test_unrenderable_messages_name_the_template_not_missing_messages(qwen, tmp_path):
    _, _, plays = qwen
    rows = []
    for p in [p for p in plays if p.messages[0]["role"] == "user"][:3]:
        rec = log_episode(p, "correct", p.scenario.id).record
        rec["messages"][0]["content"] = None  # the template cannot concatenate it
        rows.append(rec)
    res = cli(write_jsonl(tmp_path / "none.jsonl", rows), "-f", "json")
    assert res.exit_code == 3
    m = report_of(res)
    naive = next(c for c in m["checks"] if c["id"] == "replay_naive_what_if")
    assert naive["status"] == "not_applicable" and "needs messages" not in naive["summary"]
    assert "did not render the messages of 3 of 3" in naive["summary"]
    assert m["verdict"] == "error" and "error:replay_divergence:incomplete" in m["verdict_reasons"]
    assert "needs messages" not in m["verdict_explanation"]


# -- the Arrow check and the JSONL reader refuse the same records -----------------------------------------------


def test_parquet_fast_path_refuses_what_the_jsonl_reader_refuses(qwen, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    _, ctx, plays = qwen
    tito = dataclasses.replace(ctx, whatif=False, drift=False, noncanonical=False)
    good = [with_engine_prompts(log_episode(p, "correct", p.scenario.id).record, p) for p in plays[:8]]
    rows = [{k: r[k] for k in ("id", "turns", "input_ids", "loss_mask")} for r in good]
    rows = [
        dict(r, messages=json.dumps(g["messages"]), date="2026-07-26", chat_template_kwargs="{}")
        for r, g in zip(rows, good, strict=True)
    ]
    bad = copy.deepcopy(rows)
    bad[0]["input_ids"] = [-100, *bad[0]["input_ids"]]  # the trainer's ignore index, in both sequences
    bad[0]["loss_mask"] = [0, *bad[0]["loss_mask"]]
    for t in bad[0]["turns"]:
        t["prompt_ids"] = [-100, *t["prompt_ids"]]
    bad[1]["messages"] = json.dumps(json.loads(bad[1]["messages"])[:1])  # fewer assistant messages than turns
    bad[2]["date"] = "yesterday"
    bad[3]["chat_template_kwargs"] = "[1]"
    bad[4]["turns"][0]["logprobs"][0] = None
    first = bad[5]["turns"][0]["prompt_ids"]  # nothing sampled: not checked, on either path
    bad[5].update(turns=[{"ids": [], "logprobs": [], "prompt_ids": first}], input_ids=first, loss_mask=[0] * len(first))
    opening = json.loads(bad[5]["messages"])[:1]
    bad[5]["messages"] = json.dumps([*opening, {"role": "assistant", "content": ""}])
    js = replay_log(write_jsonl(tmp_path / "t.jsonl", bad), tito)
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "t.parquet", row_group_size=3)
    par = replay_log(tmp_path / "t.parquet", tito)
    assert js.malformed == 5 and js.episodes == len(bad) - 5 and js.reference_errors == 1
    assert par.to_dict() == js.to_dict() and par.findings == js.findings
    # the valid rows, context fields and all, are still decided on the Arrow buffers
    from tito_audit.replay.columns import exact_rows

    batch = pq.ParquetFile(tmp_path / "t.parquet").read_row_group(2).to_batches()[0]  # rows 7 and 8
    assert exact_rows(batch, tito.stop_ids, tito.marks, MARK_WINDOW).exact.tolist() == [True, True]


# -- options and fields that crashed ----------------------------------------------------------------------------


def test_bad_max_record_mb_and_tool_entries_are_one_line_errors(qwen, tmp_path):
    _, _, plays = qwen
    rec = log_episode(plays[0], "correct", plays[0].scenario.id).record
    log = write_jsonl(tmp_path / "ok.jsonl", [rec])
    for value in ("nan", "inf"):
        res = cli(log, "--max-record-mb", value)
        assert res.exit_code == 2 and "'--max-record-mb': " in res.stderr and "give a number from" in res.stderr, value
    res = cli(write_jsonl(tmp_path / "tools.jsonl", [dict(rec, tools=[1, 2])]), "-q")
    assert res.exit_code == 2 and "tools must be a list of tool schemas" in res.stderr


def test_suppressed_divergences_never_make_the_loop_safe(loaded, tmp_path):
    """As in the audit: a suppression accepts a divergence (exit 0), the verdict still says the loop diverges."""
    model = loaded(QWEN)
    canonical = [p for p in played_episodes(model, 0.0, seed=4) if p.scenario.id.endswith("/plain")][:6]
    rows = [log_episode(p, "stop_seam", p.scenario.id).record for p in canonical]
    toml = tmp_path / "tito-audit.toml"
    toml.write_text('[[suppress]]\ncheck = "replay_divergence"\nreason = "known, fixed next release"\n')
    res = cli(write_jsonl(tmp_path / "seam.jsonl", rows), "--suppressions", toml, "-f", "json")
    assert res.exit_code == 0, res.output
    m = report_of(res)
    assert m["replay"]["diverged_episodes"] > 0
    assert m["verdict"] == "tito-required" and m["verdict_reasons"] == ["tito-required:suppressed:replay_divergence"]
    assert "diverges where findings are suppressed" in m["verdict_explanation"]


def test_a_forced_adapter_that_does_not_fit_is_a_malformed_record(qwen, tmp_path):
    _, _, plays = qwen
    log = write_jsonl(tmp_path / "native.jsonl", [log_episode(plays[0], "correct", "x").record])
    res = cli(log, "--log-format", "skyrl", "-q")
    assert res.exit_code == 2 and "skyrl: no response_ids in this record" in res.stderr


def test_turns_only_replay_does_not_call_the_loop_exact(qwen, tmp_path):
    """Without prompt_ids and messages only the sampled turns are looked for: a loop that drops the tool result
    between two turns trains every sampled id where it was sampled, and replay says the context was not checked."""
    from tito_audit.policy.view import mask_runs

    model, ctx, plays = qwen
    rows = []
    for p in plays:
        rec = log_episode(p, "correct", p.scenario.id).record
        runs = mask_runs(rec["loss_mask"])
        if len(runs) < 2:
            continue
        (_, b0), (a1, _) = runs[:2]
        rows.append(
            {
                "id": rec["id"],
                "turns": rec["turns"],
                "input_ids": rec["input_ids"][:b0] + rec["input_ids"][a1:],  # no tool result between the turns
                "loss_mask": rec["loss_mask"][:b0] + rec["loss_mask"][a1:],
            }
        )
    assert rows
    t = replay_log(write_jsonl(tmp_path / "dropped.jsonl", rows), ctx)
    assert t.diverged_episodes == 0  # nothing here can see it
    verdict, reasons, why = verdict_of(t, model, ctx)
    assert verdict == "tito-required" and "error:replay_divergence:turns_only" in reasons
    assert "loop is exact" not in why and "the context the engine saw was not checked" in why
