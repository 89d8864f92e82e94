"""Replay never calls safe what it did not read or check: the red team's findings on branch ``redteam-ops`` (R1 a
malformed record, R2 episodes of another tokenizer, R3 a log without a trained sequence, R4 impossible log-probs,
R5 a gzip member that fails its checksum).

Logs are written here from the audit's scenarios played through ``Trajectory`` on the shared Qwen2.5 tokenizer.
"""

from __future__ import annotations

import json

import pytest
from test_replay_io import write_jsonl
from typer.testing import CliRunner

from tito_audit.cli import app
from tito_audit.replay import ReplayContext
from tito_audit.replay.synthetic import log_episode, played_episodes, with_engine_prompts

QWEN = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def qwen(loaded):
    model = loaded(QWEN)
    plays = [p for p in played_episodes(model, 0.0, seed=1) if len(p.turns) >= 2][:6]  # canonical samples
    records = [with_engine_prompts(log_episode(p, "correct", f"ep-{k}").record, p) for k, p in enumerate(plays)]
    return model, ReplayContext.from_model(model), records


def replay(*args):
    res = CliRunner().invoke(app, ["replay", *map(str, args), "-m", QWEN, "-w", "1"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res


def verdict(res):
    return json.JSONDecoder().raw_decode(res.stdout[res.stdout.index("{") :])[0]["models"][0]


def test_a_malformed_record_never_leaves_the_verdict_safe(qwen, tmp_path):
    """A record that was not read is an episode that was not checked: every format says so, none says safe, and
    the exit code is 3 (red team R1)."""
    _, _, records = qwen
    good = write_jsonl(tmp_path / "good.jsonl", records)
    res = replay(good, "-f", "json")
    assert res.exit_code == 0 and verdict(res)["verdict"] == "safe", res.output  # the control: safe alone
    broken = dict(records[1], input_ids=[str(records[1]["input_ids"][0]), *records[1]["input_ids"][1:]])
    bad = write_jsonl(tmp_path / "bad.jsonl", [records[0], broken, *records[2:]])
    res = replay(bad, "-f", "json")
    m = verdict(res)
    assert res.exit_code == 3 and m["verdict"] != "safe"
    assert "error:replay_records:malformed" in m["verdict_reasons"]
    for fmt, word in (("markdown", "SAFE"), ("html", "SAFE"), ("terminal", "SAFE")):
        res = replay(bad, "-f", fmt)
        assert res.exit_code == 3 and "TITO-REQUIRED" in res.stdout and "not checked" in res.stdout, fmt
        assert f"✅ {word}" not in res.stdout and f" {word}  " not in res.stdout.replace("TITO-REQUIRED", ""), fmt
