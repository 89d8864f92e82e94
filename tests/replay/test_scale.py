"""Replay at the trainer's scale, on untrusted logs (issue 34 "Logs are untrusted input too", issue 30 part 3).

- a record over the bound is malformed, named by its line and skipped, in JSONL, gzip and Parquet;
- memory stays bounded whatever the log holds: a gzip bomb and a Parquet log larger than the memory cap are
  replayed in a subprocess under ``resource.setrlimit(RLIMIT_AS)``;
- exact rows of a Parquet log with engine prompts are decided on the Arrow buffers: the same totals as JSONL;
- ``--engine ray`` (``ray.init(num_cpus=2)``) gives the local run's findings and totals.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import IN_CI, ROOT, write_jsonl
from tito_audit.cli import app
from tito_audit.replay import replay_log
from tito_audit.replay.reader import MAX_RECORD_BYTES, row_nbytes
from tito_audit.testing.synthetic import log_episode, with_engine_prompts

QWEN = "Qwen/Qwen2.5-7B-Instruct"
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def qwen(plays):
    model, ctx, played = plays(QWEN, 0.3, 21)
    return model, ctx, played[:16]


def engine_rows(plays, loop="correct"):
    return [with_engine_prompts(log_episode(p, loop, p.scenario.id).record, p) for p in plays]


def write_parquet(path: Path, rows, row_group_size=64) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


def test_the_cli_bound_is_the_reader_bound():
    from tito_audit.cli import replay as cli_replay

    assert cli_replay.MAX_RECORD_BYTES == MAX_RECORD_BYTES == 64 << 20


def test_an_oversized_record_is_malformed_named_and_skipped(qwen, tmp_path):
    _, ctx, plays = qwen
    rows = engine_rows(plays[:6])
    big = json.loads(json.dumps(rows[2]))
    big["messages"][0]["content"] = "y" * 120_000
    rows[2] = big
    bound = 100_000
    for name, path in (
        ("jsonl", write_jsonl(tmp_path / "o.jsonl", rows)),
        ("gz", write_jsonl(tmp_path / "o.jsonl.gz", rows, gz=True)),
        ("parquet", write_parquet(tmp_path / "o.parquet", [{k: r[k] for k in r if k != "tools"} for r in rows])),
    ):
        t = replay_log(path, ctx, max_record_bytes=bound)
        assert (t.records, t.malformed, t.episodes) == (6, 1, 5), name
        [(label, message)] = t.findings["replay_records"]
        assert label == "line 3" and "over the 0.0953674 MB bound" in message, (name, message)
        assert t.diverged_turns == 0
    res = CliRunner().invoke(
        app, ["replay", str(tmp_path / "o.jsonl.gz"), "-m", QWEN, "-w", "1", "-q", "--max-record-mb", "0.1"]
    )
    assert res.exit_code == 3 and "line 3: record of" in res.stderr, res.output


CAPPED = textwrap.dedent(
    """
    import json, resource, sys
    from tito_audit import load
    from tito_audit.replay import ReplayContext, replay_log

    model = load(sys.argv[2])
    ctx = ReplayContext.from_model(model, False, drift=False, noncanonical=sys.argv[4] == "full")
    replay_log(sys.argv[3], ctx, workers=1)  # warm up: every allocator pool the replay uses exists now
    vm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:")) * 1024
    cap = vm + int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    t = replay_log(sys.argv[5], ctx, workers=1, max_record_bytes=int(sys.argv[6]))
    print(json.dumps({"totals": t.to_dict(), "findings": t.findings.get("replay_records", [])}))
    """
)


def capped(budget: int, warm: Path, log: Path, bound: int = MAX_RECORD_BYTES, full: bool = False):
    """Replay ``log`` in a subprocess whose address space may grow by ``budget`` bytes after a warm-up replay."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"}
    args = [str(budget), QWEN, str(warm), "full" if full else "tito", str(log), str(bound)]
    res = subprocess.run(
        [sys.executable, "-c", CAPPED, *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_gzip_bomb_is_refused_with_its_line_under_a_memory_cap(qwen, tmp_path):
    _, _, plays = qwen
    rows = engine_rows(plays[:3])
    warm = write_jsonl(tmp_path / "warm.jsonl", rows)
    piece = gzip.compress(b"a" * (8 << 20), compresslevel=9)  # 8 MB of one line in 8 KB
    bomb = tmp_path / "bomb.jsonl.gz"
    with bomb.open("wb") as fh:
        fh.write(gzip.compress((json.dumps(rows[0]) + "\n" + '{"turns": ["').encode()))
        for _ in range(80):  # one line of 640 MB, in a 0.65 MB file
            fh.write(piece)
        fh.write(gzip.compress(('"]}\n' + json.dumps(rows[1]) + "\n").encode()))
    assert bomb.stat().st_size < 1 << 20
    out = capped(256 << 20, warm, bomb)  # the line is 2.5 times what the process may add
    t = out["totals"]
    assert (t["records"], t["malformed"], t["episodes"]) == (3, 1, 2)
    [[label, message]] = out["findings"]
    assert label == "line 2" and "640.0 MB is over the 64 MB bound" in message


@pytest.mark.slow
def test_a_parquet_log_larger_than_the_memory_cap_streams_by_row_group(qwen, tmp_path):
    _, _, plays = qwen
    rows = engine_rows(plays)
    warm = write_parquet(tmp_path / "warm.parquet", rows)
    table = pa.Table.from_pylist(rows)
    per_row = int(row_nbytes(table.combine_chunks().to_batches()[0]).sum()) // len(rows)
    groups = (512 << 20) // (per_row * len(rows)) + 1  # >= 512 MB of decoded rows
    big = tmp_path / "big.parquet"
    with pq.ParquetWriter(big, table.schema) as writer:
        for _ in range(groups):
            writer.write_table(table, row_group_size=len(rows))
    decoded = groups * len(rows) * per_row
    out = capped(192 << 20, warm, big)  # the log decodes to over 2.5 times what the process may add
    t = out["totals"]
    assert decoded > 2.5 * (192 << 20)
    assert t["episodes"] == groups * len(rows) and t["diverged_turns"] == 0 and t["malformed"] == 0
    assert t["reference_engine"] == t["episodes"]


def test_parquet_exact_rows_on_arrow_buffers_equal_the_jsonl_replay(qwen, tmp_path):
    _, ctx, plays = qwen
    import dataclasses

    tito = dataclasses.replace(ctx, whatif=False, drift=False, noncanonical=False)
    rows = []
    for loop in ("correct", "stop_seam", "naive_retokenize", "duplicate_previous_turn"):
        rows += [dict(r, id=f"{loop}:{r['id']}") for r in engine_rows(plays, loop)]
    rows[3] = dict(rows[3], loss_mask=None)  # a row the buffer check cannot decide: analysed whole
    rows[5]["turns"][0]["logprobs"] = rows[5]["turns"][0]["logprobs"][:-1]  # a shape finding
    rows[7]["input_ids"][-1] = 10**9  # out of the vocabulary: a malformed record
    tokens = [{k: r[k] for k in ("id", "turns", "input_ids", "loss_mask")} for r in rows]
    js = replay_log(write_jsonl(tmp_path / "t.jsonl", tokens), tito)
    par = replay_log(write_parquet(tmp_path / "t.parquet", tokens, row_group_size=17), tito)
    assert par.to_dict() == js.to_dict()
    assert par.findings == js.findings
    assert js.diverged_episodes > 0 and js.shape_episodes == 1 and js.out_of_vocabulary == 1
    # with workers, row groups go to the workers: the same again
    assert replay_log(tmp_path / "t.parquet", tito, workers=2).to_dict() == js.to_dict()


def test_ray_engine_gives_the_local_report(qwen, tmp_path):
    ray = pytest.importorskip("ray") if not IN_CI else __import__("ray")  # CI installs the ray extra: never skip
    from tito_audit.replay.distributed import ContextSpec, replay_ray

    _, ctx, plays = qwen
    shards = tmp_path / "shards"
    shards.mkdir()
    rows = []
    for loop in ("correct", "stop_seam", "naive_retokenize"):
        rows += [dict(r, id=f"{loop}:{r['id']}") for r in engine_rows(plays, loop)]
    tokens = [{k: r[k] for k in ("id", "turns", "input_ids", "loss_mask", "messages")} for r in rows]
    tokens[4] = dict(tokens[4], loss_mask=[2] * len(tokens[4]["input_ids"]))  # a malformed row
    for n in range(3):
        write_parquet(shards / f"part-{n:05d}.parquet", tokens[n::3], row_group_size=5)
    empty = pa.Table.from_pylist(tokens[:1]).slice(0, 0)  # a shard left empty: the schema, no row
    pq.write_table(empty, shards / "part-00001-empty.parquet")
    pattern = str(shards / "*.parquet")
    spec = ContextSpec(QWEN, whatif=True, drift=True, noncanonical=True)
    local = replay_log(pattern, ctx)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = replay_ray([pattern], spec, ctx, actors=2)
    finally:
        ray.shutdown()
    assert remote.to_dict() == local.to_dict()
    assert remote.findings == local.findings
    assert local.malformed == 2 and local.diverged_episodes > 0 and local.drift_episodes > 0
    assert local.findings["replay_records"] == [
        ("part-00001-empty.parquet line 1", "the log holds no record"),
        ("part-00001.parquet line 2", local.findings["replay_records"][1][1]),
    ]
