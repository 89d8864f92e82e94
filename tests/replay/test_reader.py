"""Replay's input side: native records, the vLLM and SkyRL dump formats, --map, and bad logs.

Fixtures are written by the tests from episodes played through ``Trajectory`` in the frameworks' verified field
names (vLLM ``RequestOutput``/``CompletionOutput``/``Logprob``; SkyRL ``GeneratorOutput``): see docs/replay.md.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, write_jsonl
from tests.replay.conftest import vllm_record
from tito_audit.cli import app
from tito_audit.replay import FieldMap, MapError, ReplayContext, replay_log
from tito_audit.testing.synthetic import log_episode, played_episodes

MODEL = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def setup(loaded):
    model = loaded(MODEL)
    return model, ReplayContext.from_model(model), played_episodes(model, 0.3, seed=3)[:12]


def skyrl_batch(plays):
    """A SkyRL GeneratorOutput (skyrl_train/generators/base.py) for these episodes: prompt + response."""
    out = {"prompt_token_ids": [], "response_ids": [], "loss_masks": [], "rollout_logprobs": [], "rewards": []}
    for p in plays:
        n = p.traj.prompt_length
        out["prompt_token_ids"].append(p.traj.input_ids[:n])
        out["response_ids"].append(p.traj.input_ids[n:])
        out["loss_masks"].append(p.traj.loss_mask[n:])
        out["rollout_logprobs"].append([0.0 if lp is None else lp for lp in p.traj.logprobs[n:]])
        out["rewards"].append(1.0)
    return out


def test_native_jsonl_gz_and_parquet_agree(setup, tmp_path):
    _, ctx, plays = setup
    rows = [log_episode(p, "naive_retokenize", p.scenario.id).record for p in plays]
    truth = sum(len(log_episode(p, "naive_retokenize", "").truth) for p in plays)
    plain = replay_log(write_jsonl(tmp_path / "a.jsonl", rows), ctx)
    gz = replay_log(write_jsonl(tmp_path / "a.jsonl.gz", rows, gz=True), ctx)
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    # token columns only (nested list<struct> columns): the reference is then the sampled turns
    table = pa.Table.from_pylist([{k: r[k] for k in ("id", "turns", "input_ids", "loss_mask")} for r in rows])
    pq.write_table(table, tmp_path / "a.parquet")
    par = replay_log(tmp_path / "a.parquet", ctx)
    assert plain.episodes == gz.episodes == par.episodes == len(rows)
    assert plain.diverged_turns == gz.diverged_turns == truth > 0
    assert par.diverged_episodes == plain.diverged_episodes  # turns-only reference: the same episodes diverge
    assert plain.malformed == gz.malformed == par.malformed == 0


def test_workers_give_the_same_totals(setup, tmp_path):
    _, ctx, plays = setup
    rows = [log_episode(p, "stop_seam", p.scenario.id).record for p in plays] * 3
    path = write_jsonl(tmp_path / "w.jsonl", rows)
    one, two = replay_log(path, ctx), replay_log(path, ctx, workers=2)
    assert one.to_dict() == two.to_dict()
    assert one.episodes == len(rows) and one.diverged_turns > 0


def test_malformed_truncated_and_mixed_logs_lose_no_episode(setup, tmp_path):
    _, ctx, plays = setup
    good = [log_episode(p, "correct", p.scenario.id).record for p in plays[:4]]
    lines = [
        json.dumps(good[0]),
        "{not json",
        json.dumps({"input_ids": [1, 2]}),  # no turns
        json.dumps(vllm_record(plays[1], with_trainer=True)),  # another format in the same log
        json.dumps({**good[2], "loss_mask": [2] * len(good[2]["input_ids"])}),  # not 0/1
        "",
        json.dumps(good[3])[:50],  # truncated last line
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines), encoding="utf-8")
    t = replay_log(path, ctx)
    assert (t.episodes, t.malformed, t.records) == (2, 4, 6)  # 1 native + 1 vLLM replayed, 4 bad lines counted
    assert t.by_source == {"native": 1, "vllm": 1}
    assert t.diverged_turns == 0
    bad = {label: msg for label, msg in t.findings["replay_records"]}
    assert set(bad) == {"line 2", "line 3", "line 5", "line 7"}
    assert "not JSON" in bad["line 2"] and "unknown record layout (keys: input_ids)" in bad["line 3"]
    assert "0/1" in bad["line 5"] and "truncated" in bad["line 7"]
    # workers parse the lines themselves: the same episodes, the same numbered errors
    assert replay_log(path, ctx, workers=2).to_dict() == t.to_dict()


def test_truncated_gzip_keeps_what_was_read(setup, tmp_path):
    _, ctx, plays = setup
    rows = [log_episode(p, "correct", p.scenario.id).record for p in plays]
    full = write_jsonl(tmp_path / "t.jsonl.gz", rows, gz=True).read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(full[: len(full) // 2])
    t = replay_log(cut, ctx)
    assert 0 < t.episodes < len(rows) and t.malformed == 1
    assert "ends early" in t.findings["replay_records"][0][1]


def test_vllm_requests_alone_check_the_engine_context(setup, tmp_path):
    _, ctx, plays = setup
    path = write_jsonl(tmp_path / "v.jsonl", [vllm_record(p, with_trainer=False) for p in plays])
    t = replay_log(path, ctx)
    assert t.episodes == len(plays) and t.by_source == {"vllm": len(plays)} and t.diverged_turns == 0
    assert t.logprob_tokens == 0  # nothing affected


def test_vllm_with_a_broken_trainer_sequence(setup, tmp_path):
    _, ctx, plays = setup
    rows = []
    for p in plays:
        rec = vllm_record(p, with_trainer=True)
        rec["loss_mask"] = log_episode(p, "stop_seam", "").record["loss_mask"]
        rows.append(rec)
    t = replay_log(write_jsonl(tmp_path / "vb.jsonl", rows), ctx)
    turns = sum(len(p.turns) for p in plays)
    assert t.diverged_turns == turns and t.by_class == {"stop_seam": turns}
    # the vLLM logprobs of the masked stop tokens are the affected mass
    want = sum(lps[-1] for p in plays for lps in p.logprobs)
    assert t.logprob_tokens == turns and abs(t.logprob_mass - want) < 1e-6


def test_skyrl_generator_output(setup, tmp_path):
    _, ctx, plays = setup
    good = skyrl_batch(plays)
    broken = skyrl_batch(plays)
    broken["loss_masks"][0] = broken["loss_masks"][0][:-1]  # one mask shorter than its response
    t = replay_log(write_jsonl(tmp_path / "s.jsonl", [good, broken]), ctx)
    assert t.episodes == 2 * len(plays) and t.by_source == {"skyrl": 2 * len(plays)}
    assert t.shape_episodes == 1 and t.diverged_turns == 0
    assert t.noncanonical_turns == 2 * sum(s is not None for p in plays for s in p.splits)


def test_map_points_native_fields_at_another_layout(setup, tmp_path):
    _, ctx, plays = setup
    rows = []
    for p in plays:
        rec = log_episode(p, "stop_seam", p.scenario.id).record
        rows.append(
            {
                "batch": {"tokens": rec["input_ids"], "mask": rec["loss_mask"]},
                "samples": [{"token_ids": t["ids"], "lp": t["logprobs"]} for t in rec["turns"]],
                "conv": rec["messages"],
                "tools": rec.get("tools"),
            }
        )
    fmap = FieldMap.parse(
        [
            "input_ids=batch.tokens,loss_mask=batch.mask,turns=samples",
            "turns.ids=token_ids,turns.logprobs=lp,messages=conv",
        ]
    )
    t = replay_log(write_jsonl(tmp_path / "m.jsonl", rows), ctx, field_map=fmap)
    assert t.episodes == len(plays) and t.reference_buffer == len(plays)
    assert t.by_class == {"stop_seam": sum(len(p.turns) for p in plays)}
    with pytest.raises(MapError, match="unknown native field"):
        FieldMap.parse(["tokens=batch.tokens"])


def test_cli_exit_codes_and_formats(setup, tmp_path):
    _, _, plays = setup
    runner = CliRunner()
    ok = write_jsonl(tmp_path / "ok.jsonl", [log_episode(p, "correct", p.scenario.id).record for p in plays[:3]])
    broken = write_jsonl(tmp_path / "br.jsonl", [log_episode(p, "stop_seam", p.scenario.id).record for p in plays[:3]])
    res = runner.invoke(app, ["replay", str(ok), "--model", MODEL, "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert "replay_divergence" in res.output
    res = runner.invoke(app, ["replay", str(broken), "--model", MODEL, "-w", "1", "--format", "json"])
    assert res.exit_code == 1
    doc = json.loads(res.stdout)
    m = doc["models"][0]
    assert m["verdict"] == "unsafe" and m["replay"]["by_class"] == {"stop_seam": sum(len(p.turns) for p in plays[:3])}
    schema = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    pytest.importorskip("jsonschema").validate(doc, schema)  # the audit's versioned JSON schema
    div = next(c for c in m["checks"] if c["id"] == "replay_divergence")
    assert div["status"] == "fail" and div["findings"][0]["class"] == "stop_seam"
    # suppress the class: exit 0, findings kept and marked
    sup = tmp_path / "s.toml"
    sup.write_text(
        '[[suppress]]\ncheck = "replay_divergence"\nclass = "stop_seam"\nreason = "we mask stops on purpose"\n'
    )
    res = runner.invoke(app, ["replay", str(broken), "--model", MODEL, "-w", "1", "--suppressions", str(sup), "-q"])
    assert res.exit_code == 0, res.output
    # a baseline of the broken run: nothing new
    base = tmp_path / "base.json"
    base.write_text(runner.invoke(app, ["replay", str(broken), "-m", MODEL, "-w", "1", "-f", "json"]).stdout)
    res = runner.invoke(app, ["replay", str(broken), "-m", MODEL, "-w", "1", "--baseline", str(base), "-q"])
    assert res.exit_code == 0, res.output
    for fmt in ("markdown", "html", "sarif"):
        res = runner.invoke(app, ["replay", str(broken), "-m", MODEL, "-w", "1", "-f", fmt])
        assert res.exit_code == 1 and "replay_divergence" in res.stdout
    # malformed lines: exit 3, the others still reported
    bad = tmp_path / "bad.jsonl"
    bad.write_text(ok.read_text() + "{oops\n")
    res = runner.invoke(app, ["replay", str(bad), "-m", MODEL, "-w", "1", "-q"])
    assert res.exit_code == 3 and "1 of 4 record(s) malformed" in res.stderr and "line 4" in res.stderr
    # empty log, missing log, bad map: exit 2 with one line
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for args in ([str(empty)], [str(tmp_path / "nope.jsonl")], [str(ok), "--map", "x=y"]):
        res = runner.invoke(app, ["replay", *args, "-m", MODEL, "-w", "1", "-q"])
        assert res.exit_code == 2 and res.stderr.startswith("error: ") and len(res.stderr.strip().splitlines()) == 1


def test_ids_are_checked_in_c_with_the_same_rules():
    """The C-level check (``array``) keeps the rules: integers >= 0, a float without fraction read as its integer,
    bools and negatives refused, a mask of 0/1 only; prompt ids only compared (a bool there equals 1 anyway)."""
    from tito_audit.replay.schema import RecordError, episode_from_native

    def rec(ids=(5, 6), mask=(1, 1), prompt=(0, 1)):
        return {"turns": [{"ids": list(ids), "prompt_ids": list(prompt)}], "input_ids": [0, 1, 5, 6],
                "loss_mask": [0, 0, *mask]}  # fmt: skip

    assert episode_from_native(rec(ids=(5.0, 6))).turns[0].ids == [5, 6]
    for bad, match in (((True, 6), "bool"), ((-1, 6), "negative"), (("5", 6), "str"), ((None, 6), "NoneType")):
        with pytest.raises(RecordError, match=match):
            episode_from_native(rec(ids=bad))
    for bad_mask in ((2, 1), (True, 1)):
        with pytest.raises(RecordError):
            episode_from_native(rec(mask=bad_mask))
    assert episode_from_native(rec(prompt=(0, True))).turns[0].prompt_ids == [0, True]


def test_messages_as_json_text_in_parquet_read_as_in_jsonl(setup, tmp_path):
    """Messages and tools kept as JSON text (one string column) replay exactly as the JSONL record."""
    _, ctx, plays = setup
    rows = [log_episode(p, "stop_seam", p.scenario.id).record for p in plays]
    text = [
        {**r, **{k: json.dumps(r[k]) for k in ("messages", "tools", "chat_template_kwargs") if k in r}} for r in rows
    ]
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(text), tmp_path / "text.parquet")
    par = replay_log(tmp_path / "text.parquet", ctx)
    js = replay_log(write_jsonl(tmp_path / "rows.jsonl", rows), ctx)
    assert par.to_dict() == js.to_dict() and par.reference_buffer == len(rows) and par.whatif_episodes == len(rows)


def _gzip_cases() -> dict[str, tuple[bytes, list[object]]]:
    """Gzip streams and what ``iter_lines`` must give for each: a line (its length) or the words of its error."""
    import gzip

    lines = [(json.dumps({"a": i, "pad": "x" * (i * 3000)}) + "\n").encode() for i in range(4)]
    one = gzip.compress(b"".join(lines[:3]))
    crc = bytearray(gzip.compress(lines[1] + lines[2]))
    crc[-8] ^= 0xFF  # the CRC32
    length = bytearray(gzip.compress(lines[1]))
    length[-2] ^= 0xFF  # the length
    corrupt = bytearray(one)
    corrupt[20] ^= 0xFF  # in the deflate data
    checksum, sizes = "fails its checksum", [len(x) for x in lines]
    return {
        "crc": (
            gzip.compress(lines[0]) + bytes(crc) + gzip.compress(lines[3]),
            [sizes[0], checksum, checksum, sizes[3]],
        ),
        "length": (gzip.compress(lines[0]) + bytes(length) + gzip.compress(lines[3]), [sizes[0], checksum, sizes[3]]),
        "cut in its trailer": (one[:-3], [*sizes[:3], "inside its last gzip trailer"]),
        "cut before its trailer": (one[:-12], [*sizes[:2], "ends early; not replayed"]),
        "not gzip after a member": (one + b"hello\n", [*sizes[:3], "not gzip data"]),
        "corrupt deflate data": (bytes(corrupt), ["the compressed data is corrupt"]),
    }


@pytest.mark.parametrize("case", list(_gzip_cases()))
def test_gzip_members_are_checked_one_by_one(tmp_path, case):
    """A member's lines are given only once its CRC32 and length hold; a member that fails is named line by line
    and the next member read; a stream cut short keeps its whole lines; what cannot be followed ends the log."""
    from tito_audit.replay.reader import iter_lines

    data, want = _gzip_cases()[case]
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(data)
    got = list(iter_lines(path))
    numbers = list(range(1, len(want) + 1))
    if case == "cut in its trailer":  # no fourth record: the unchecked end is said on the last line read
        numbers[-1] -= 1
    assert [n for n, _ in got] == numbers
    for (_, rec), expected in zip(got, want, strict=True):
        if isinstance(expected, int):
            assert isinstance(rec, bytes) and len(rec) == expected
        else:
            assert not isinstance(rec, bytes) and expected in str(rec), (case, rec)
