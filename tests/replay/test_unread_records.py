"""Replay never calls safe what it did not read or check: the red team's findings on branch ``redteam-ops`` (R1 a
malformed record, R2 episodes of another tokenizer, R3 a log without a trained sequence, R4 impossible log-probs,
R5 a gzip member that fails its checksum).

Logs are written here from the audit's scenarios played through ``Trajectory`` on the shared Qwen2.5 tokenizer.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import invoke, write_jsonl
from tests.replay.conftest import cli as replay
from tests.replay.conftest import report_of as verdict
from tests.replay.conftest import vllm_record
from tito_audit.testing.synthetic import log_episode, played_episodes, with_engine_prompts

QWEN = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def qwen(plays):
    model, ctx, played = plays(QWEN, 0.0, 1)
    canonical = [p for p in played if len(p.turns) >= 2][:6]  # canonical samples
    records = [with_engine_prompts(log_episode(p, "correct", f"ep-{k}").record, p) for k, p in enumerate(canonical)]
    return model, ctx, records


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


@pytest.mark.parametrize("tokens_only", [False, True])
def test_episodes_of_another_tokenizer_are_refused_one_by_one(qwen, loaded, tmp_path, tokens_only):
    """One Qwen2.5 episode, then Phi-3's (ids all inside Qwen's vocabulary): each Phi-3 episode is not checked and
    named, never replayed as Qwen text, and the verdict says so (red team R2); Phi-3's alone is refused (exit 2)."""
    _, _, records = qwen
    phi = loaded("microsoft/Phi-3-mini-4k-instruct")
    plays = [p for p in played_episodes(phi, 0.0, seed=1) if p.turns][:12]
    foreign = [with_engine_prompts(log_episode(p, "correct", f"phi-{k}").record, p) for k, p in enumerate(plays)]
    rows = [records[0], *foreign]
    if tokens_only:  # what a Parquet or tokens-only dump keeps: no messages, no prompts
        rows = [{k: r[k] for k in ("id", "input_ids", "loss_mask")} | {"turns": [{"ids": t["ids"]} for t in
                r["turns"]]} for r in rows]  # fmt: skip
    res = replay(write_jsonl(tmp_path / "mixed.jsonl", rows), "-f", "json")
    m = verdict(res)
    assert res.exit_code == 3 and m["verdict"] != "safe", res.output
    assert "error:replay_divergence:incomplete" in m["verdict_reasons"]
    assert m["replay"]["reference_errors"] == len(foreign) and m["replay"]["diverged_episodes"] == 0
    incomplete = next(c for c in m["checks"] if c["id"] == "replay_incomplete")
    assert len(incomplete["findings"]) == len(foreign)
    assert all("does not read as" in f["message"] for f in incomplete["findings"])
    res = replay(write_jsonl(tmp_path / "phi.jsonl", rows[1:]), "-f", "json")
    assert res.exit_code == 2 and "does not read as" in res.stderr


@pytest.mark.parametrize("bad", [5.0, float("nan"), float("inf"), float("-inf")])
def test_an_impossible_log_prob_is_a_malformed_record(qwen, tmp_path, bad):
    """A log-prob is finite and at most 0: +5, NaN or an infinity cannot be the engine's, so the record is
    malformed and named by its line, in JSONL and on the Parquet fast path (red team R4)."""
    _, _, records = qwen
    broken = json.loads(json.dumps(records[1]))
    broken["turns"][0]["logprobs"][1] = bad
    rows = [records[0], broken, *records[2:]]
    res = replay(write_jsonl(tmp_path / "lp.jsonl", rows), "-f", "json")
    assert res.exit_code == 3 and verdict(res)["verdict"] != "safe", res.output
    assert "line 2" in res.stderr and "turns[0].logprobs[1]" in res.stderr
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    tokens = [{k: r[k] for k in ("id", "turns", "input_ids", "loss_mask")} for r in rows]
    pq.write_table(pa.Table.from_pylist(tokens), tmp_path / "lp.parquet")
    res = replay(tmp_path / "lp.parquet", "--only-tito", "-f", "json")
    assert res.exit_code == 3 and "line 2" in res.stderr and "turns[0].logprobs[1]" in res.stderr, res.output


def test_a_gzip_member_that_fails_its_checksum_is_not_replayed(qwen, tmp_path):
    """Three gzip members, the second with a wrong CRC32: its record is named (line 2) and not replayed, the
    intact third is replayed (red team R5). A stream cut short keeps the lines before the cut (a crash)."""
    import gzip

    _, _, records = qwen
    lines = [(json.dumps(r) + "\n").encode() for r in records[:3]]
    second = bytearray(gzip.compress(lines[1]))
    second[-8] ^= 0xFF  # the CRC32 in the trailer
    path = tmp_path / "crc.jsonl.gz"
    path.write_bytes(gzip.compress(lines[0]) + bytes(second) + gzip.compress(lines[2]))
    res = replay(path, "-f", "json")
    m = verdict(res)
    assert res.exit_code == 3 and m["verdict"] != "safe", res.output
    assert "line 2" in res.stderr and "checksum" in res.stderr and "line 3" not in res.stderr
    assert m["replay"]["episodes"] == 2 and m["replay"]["malformed"] == 1
    one = gzip.compress(b"".join(lines))  # one member, cut in its last line: the first two lines are replayed
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(one[: len(one) - 40])
    res = replay(cut, "-f", "json")
    assert res.exit_code == 3 and verdict(res)["replay"]["episodes"] == 2 and "line 3" in res.stderr, res.output


def test_a_log_without_a_trained_sequence_never_claims_the_trainer(loaded, tmp_path):
    """A vLLM ``requests`` dump with no ``input_ids``: the trained sequence is the engine's own last prompt and
    output, so the headline says the trainer side was not logged, and nothing says "every episode checked" without
    saying so; never safe (red team R3). With the trainer's fields the same episodes carry no such reason."""
    model = loaded(QWEN)
    plays = [p for p in played_episodes(model, 0.0, seed=1) if len(p.turns) >= 2][:3]
    res = replay(write_jsonl(tmp_path / "engine.jsonl", [vllm_record(p, False) for p in plays]), "-f", "json")
    m = verdict(res)
    assert m["verdict"] != "safe" and "error:replay_divergence:no_trainer" in m["verdict_reasons"], res.output
    assert m["verdict_explanation"].startswith("the trainer side was not logged")
    assert "sits in the trained sequence" not in m["verdict_explanation"]
    assert m["replay"]["no_trainer_episodes"] == len(plays)
    incomplete = next(c for c in m["checks"] if c["id"] == "replay_incomplete")
    assert "trainer side was not checked" in incomplete["summary"]
    res = replay(write_jsonl(tmp_path / "both.jsonl", [vllm_record(p, True) for p in plays]), "-f", "json")
    assert "error:replay_divergence:no_trainer" not in verdict(res)["verdict_reasons"], res.output


@pytest.mark.parametrize("cut", [3, 8], ids=["part-of-the-trailer-lost", "the-whole-trailer-lost"])
def test_a_gzip_log_cut_in_its_trailer_counts_no_record_that_is_not_there(qwen, tmp_path, cut):
    """A 2-record log whose last gzip trailer is cut (a crash while writing): both records are read whole and
    replayed, none is counted malformed (there is no third record), and what could not be checked is said: the
    checksum, so the run is still incomplete (exit 3), never safe."""
    import gzip

    _, _, records = qwen
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in records[:2]).encode())
    path = tmp_path / "two.jsonl.gz"
    path.write_bytes(data[:-cut])
    res = replay(path, "-f", "json")
    m = verdict(res)
    assert res.exit_code == 3 and m["verdict"] != "safe", res.output
    assert m["replay"]["records"] == 2 and m["replay"]["episodes"] == 2 and m["replay"]["malformed"] == 0
    assert "malformed" not in res.stderr and "of 3 record" not in res.stderr
    assert "its 2 record(s) were read whole, but their checksum could not be checked" in res.stderr
    assert "error:replay_records:unchecked_tail" in m["verdict_reasons"]
    assert "error:replay_records:malformed" not in m["verdict_reasons"]


def test_a_parquet_log_that_does_not_open_is_one_malformed_record_among_several(qwen, tmp_path):
    """Red team 49: one Parquet file that does not open (cut short, or not Parquet) among several logs stopped the
    whole replay (exit 2, nothing replayed, a two-line error). It is one malformed record of its file: the other
    logs are replayed and the run is incomplete (exit 3); alone, nothing could be replayed (exit 2, one line)."""
    _, _, records = qwen
    good = write_jsonl(tmp_path / "good.jsonl", records)
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(b"PAR1" + bytes(64) + b"PAR1")
    res = replay(good, fake, "-f", "json")
    assert res.exit_code == 3, res.output
    report = verdict(res)
    assert report["verdict"] != "safe"
    checks = {c["id"]: c for c in report["checks"]}
    assert any(
        "fake.parquet" in f["scenario"] and "not a readable Parquet file" in f["message"]
        for f in checks["replay_records"]["findings"]
    )
    alone = replay(fake)
    assert alone.exit_code == 2
    assert len(alone.stderr.strip().splitlines()) == 1 and "not a readable Parquet file" in alone.stderr


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_empty_log_among_several_is_named_never_passed_over(qwen, tmp_path, workers):
    """An empty log (a writer that crashed before its first record) among several was passed over in silence: the
    run said safe with exit 0 for episodes the empty log never held. It is one malformed record of its file (exit
    3, not safe), in process and in workers alike; alone, or with only other empty logs, nothing was replayed
    (exit 2, one line)."""
    _, _, records = qwen
    good = write_jsonl(tmp_path / "good.jsonl", records)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")  # blank lines only: no record
    res = invoke("replay", str(good), str(empty), "-f", "json", "-m", QWEN, "-w", workers)
    assert res.exit_code == 3, res.output
    report = verdict(res)
    assert report["verdict"] != "safe"
    findings = {c["id"]: c for c in report["checks"]}["replay_records"]["findings"]
    assert [f["message"] for f in findings if "empty.jsonl" in f["scenario"]] == ["the log holds no record"]
    assert "1 of 7 record(s) malformed" in res.stderr
    other = tmp_path / "other.jsonl"
    other.write_text("")
    for alone in (replay(empty), replay(empty, other)):
        assert alone.exit_code == 2
        assert len(alone.stderr.strip().splitlines()) == 1 and "the log holds no record" in alone.stderr
