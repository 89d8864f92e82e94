"""``tito_audit.replay.LogWriter`` (issue 30.2): every format round-trips through ``replay`` (record for record and
total for total), rotation keeps every part a log of its own, threads share a writer, an existing log is appended
to, and a writer process killed mid-run leaves a log that replays (a torn tail, if any, cut on the next open).

The records are the audit's scenarios played through ``Trajectory`` on the bundled Qwen2.5 tokenizer
(``tito_audit.testing.synthetic``), logged by a loop that re-tokenizes, so the replay has divergences, what-ifs and
non-canonical turns to lose if a writer dropped or changed anything.
"""

from __future__ import annotations

import gc
import gzip
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import IN_CI, ROOT
from tito_audit.replay import RecordError, ReplayContext, episode_from_native, iter_records, replay_log
from tito_audit.testing.synthetic import log_episode, played_episodes
from tito_audit.trainer import containers as containers_module
from tito_audit.trainer.writer import LogWriter, per_rank_path

MODEL = "qwen2.5-7b-instruct"
HAVE_PYARROW = importlib.util.find_spec("pyarrow") is not None
PARQUET = pytest.param(  # in CI pyarrow is installed (the parquet extra): a missing one fails there
    "log.parquet", marks=pytest.mark.skipif(not HAVE_PYARROW and not IN_CI, reason="pyarrow is not installed")
)
FORMATS = ["log.jsonl", "log.jsonl.gz", PARQUET]


@pytest.fixture(scope="module")
def setup(loaded):
    model = loaded(MODEL)
    plays = played_episodes(model, 0.3, seed=5)[:16]
    records = [log_episode(p, "naive_retokenize", f"ep-{k}").record for k, p in enumerate(plays)]
    return ReplayContext.from_model(model), records


def reference(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    """The same records as plain ``json.dumps`` lines: what replay reads today."""
    path = tmp_path / "reference.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def episodes(paths: list[Path]) -> list[Any]:
    out = []
    for path in paths:
        for line, record in iter_records(path):
            assert not isinstance(record, Exception), f"{path} line {line}: {record}"
            ep = episode_from_native(record)
            out.append(ep)
    return out


def summed(totals: list[Any]) -> dict[str, Any]:
    """Totals of several parts added up (counts and per-class counters; the rate recomputed)."""
    out: dict[str, Any] = {}
    for t in totals:
        for k, v in t.to_dict().items():
            if isinstance(v, dict):
                merged = out.setdefault(k, {})
                for kk, vv in v.items():
                    merged[kk] = merged.get(kk, 0) + vv
            elif k != "noncanonical_rate":
                out[k] = round(out.get(k, 0) + v, 6)
    out["noncanonical_rate"] = round(out["noncanonical_turns"] / out["turns"], 6) if out.get("turns") else 0.0
    return out


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("max_bytes", [None, 20_000])
def test_every_format_round_trips_through_replay(setup, tmp_path, name, max_bytes):
    ctx, records = setup
    with LogWriter(tmp_path / name, max_bytes=max_bytes) as log:
        for k, r in enumerate(records):
            if k % 2:  # a loop's own fields, through write_episode
                log.write_episode(
                    sampled=[t["ids"] for t in r["turns"]],
                    logprobs=[t.get("logprobs") for t in r["turns"]],
                    input_ids=r["input_ids"],
                    loss_mask=r["loss_mask"],
                    messages=r["messages"],
                    tools=r.get("tools"),
                    chat_template_kwargs=r.get("chat_template_kwargs"),
                    id=r["id"],
                )
            else:  # a native record as record_from_trajectory writes it
                log.write(r)
            if k % 5 == 4:
                log.flush()
    paths = log.paths
    rotated = max_bytes is not None or name.endswith(".parquet")
    assert (len(paths) > 1) == rotated  # 16 records of ~5 kB: several parts, or one file as named
    if not rotated:
        assert paths == [tmp_path / name]
    if max_bytes is not None and not name.endswith(".parquet"):
        assert all(p.stat().st_size <= max_bytes for p in paths)

    # record for record: every field as it was written
    expected = [episode_from_native(r) for r in records]
    assert [
        (e.id, e.turns, e.input_ids, e.loss_mask, e.messages, e.tools, e.template_kwargs) for e in episodes(paths)
    ] == [(e.id, e.turns, e.input_ids, e.loss_mask, e.messages, e.tools, e.template_kwargs) for e in expected]
    # total for total: the same replay as the same records written by hand
    want = replay_log(reference(tmp_path, records), ctx).to_dict()
    got = summed([replay_log(p, ctx) for p in paths])
    assert got == want
    assert want["diverged_turns"] > 0 and want["whatif_episodes"] == want["episodes"] == len(records)


@pytest.mark.skipif(not HAVE_PYARROW and not IN_CI, reason="pyarrow is not installed")
def test_replay_cli_reads_a_parquet_part(setup, tmp_path):
    from typer.testing import CliRunner

    from tito_audit.cli import app

    _, records = setup
    with LogWriter(tmp_path / "run.parquet") as log:
        for r in records:
            log.write(r)
    (part,) = log.paths
    result = CliRunner().invoke(app, ["replay", str(part), "-m", MODEL, "--format", "json", "-w", "1"])
    report = json.loads(result.stdout)["models"][0]
    assert result.exit_code == 1 and report["verdict"] == "unsafe"  # the naive loop's divergences, found
    assert report["replay"]["episodes"] == len(records) and report["replay"]["malformed"] == 0


def test_threads_share_one_writer(setup, tmp_path):
    _, records = setup
    log = LogWriter(tmp_path / "t.jsonl.gz", max_bytes=30_000, buffer_bytes=8_000)

    def work(thread: int) -> None:
        for k in range(25):
            log.write({**records[k % len(records)], "id": f"t{thread}-{k}"})

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    ids = [e.id for e in episodes(log.paths)]
    assert sorted(ids) == sorted(f"t{t}-{k}" for t in range(8) for k in range(25))
    assert len(log.paths) > 1


def test_reopening_appends_and_a_second_writer_is_refused(setup, tmp_path):
    _, records = setup
    for name in ("a.jsonl", "a.jsonl.gz", "a.parquet")[: 3 if HAVE_PYARROW or IN_CI else 2]:
        with LogWriter(tmp_path / name) as first:
            first.write(records[0])
        with LogWriter(tmp_path / name) as second:
            second.write(records[1])
        paths = sorted({*first.paths, *second.paths})
        assert [e.id for e in episodes(paths)] == [records[0]["id"], records[1]["id"]]
    holder = LogWriter(tmp_path / "held.jsonl")
    holder.write(records[0])
    holder.flush()
    intruder = LogWriter(tmp_path / "held.jsonl")  # files are opened at the first flush
    intruder.write(records[1])
    with pytest.raises(RuntimeError, match=r"another writer .* is writing this log"):
        intruder.flush()
    holder.close()
    intruder.close()  # the lock is free now: its record is appended
    assert [e.id for e in episodes([tmp_path / "held.jsonl"])] == [records[0]["id"], records[1]["id"]]


def test_a_bad_record_is_refused_at_write_time(setup, tmp_path):
    _, records = setup
    log = LogWriter(tmp_path / "bad.jsonl")
    with pytest.raises(RecordError, match="loss_mask must hold 0/1"):
        log.write({**records[0], "loss_mask": [2] * len(records[0]["input_ids"])})
    with pytest.raises(RecordError, match="assistant message"):
        log.write_episode(sampled=[[1, 2]], input_ids=[1, 2], messages=[{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="logprobs has 1 entries for 2 sampled turns"):
        log.write_episode(sampled=[[1], [2]], input_ids=[1, 2], logprobs=[[0.0]])
    log.close()
    assert log.records == 0 and not (tmp_path / "bad.jsonl").exists()
    with pytest.raises(ValueError, match="cannot tell the log format"):
        LogWriter(tmp_path / "log.txt")


@pytest.mark.parametrize("name", ["log.jsonl", "log.jsonl.gz", "log.parquet"])
def test_lengths_and_types_are_checked_when_written_naming_the_episode(tmp_path, name):
    """A loss mask or log-probs that do not match the ids they describe, or ids that are not ids, are refused by
    ``write_episode`` itself, naming the episode (its number in this writer and its id), not found at replay."""
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    log = LogWriter(tmp_path / name)
    log.write_episode(sampled=[[5, 6]], input_ids=[1, 5, 6], loss_mask=[0, 1, 1], id="step0-ep0")
    bad = {
        "loss_mask has 4 values for 3 input_ids": {"loss_mask": [0, 1, 1, 1]},
        "loss_mask has 2 values for 3 input_ids": {"loss_mask": [0, 1]},
        r"turns\[0\].logprobs has 1 values for 2 ids": {"loss_mask": [0, 1, 1], "logprobs": [[-0.5]]},
        r"turns\[0\].ids must hold integers \(found str": {"sampled": [["5", 6]]},
        r"input_ids must hold integers \(found float": {"input_ids": [1.5, 5, 6]},
    }
    for k, (why, change) in enumerate(bad.items()):
        fields = {"sampled": [[5, 6]], "input_ids": [1, 5, 6], "loss_mask": [0, 1, 1], "id": f"step1-ep{k}"} | change
        with pytest.raises(RecordError, match=rf"{name}: episode 2 \(id 'step1-ep{k}'\): {why}"):
            log.write_episode(**fields)
    with pytest.raises(RecordError, match=r"episode 2: loss_mask has 4 values"):  # no id: its number alone
        log.write_episode(sampled=[[5, 6]], input_ids=[1, 5, 6], loss_mask=[0, 1, 1, 1])
    log.close()
    assert log.records == 1 and [e.id for e in episodes(log.paths)] == ["step0-ep0"]  # nothing bad was written


# -- crashes ------------------------------------------------------------------------------------------------------

CHILD = """
import json, os, sys, threading
from tito_audit.trainer.writer import LogWriter
records = json.load(open(sys.argv[1]))
log = LogWriter(sys.argv[2], max_bytes=int(sys.argv[3]), buffer_bytes=int(sys.argv[4]))
torn = sys.argv[5] == "torn"
if torn:  # the kernel cutting the third write short (a kill inside the system call): half the chunk, then death
    real_write, calls = os.write, []
    def write(fd, data):
        calls.append(fd)
        if len(calls) < 3:
            return real_write(fd, data)
        real_write(fd, bytes(data)[: len(data) // 2])
        os._exit(0)
    os.write = write
lock = threading.Lock()
flushed = [0]
def work(t):
    for k in range(10**6):
        log.write({**records[k % len(records)], "id": f"{t}-{k}"})
        if k % 3 == 2:
            log.flush()
            with lock:
                flushed[0] += 3
                print(flushed[0], flush=True)
threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def run_child(tmp_path: Path, records: list[dict[str, Any]], name: str, mode: str) -> tuple[Path, int]:
    """Start a writer process; kill it (SIGKILL) after it has flushed some records, or let it tear its write."""
    data = tmp_path / "records.json"
    data.write_text(json.dumps(records[:6]), encoding="utf-8")
    log = tmp_path / name
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-c", CHILD, str(data), str(log), "60000", "16000", mode]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=env)
    flushed = 0
    if mode == "kill":
        assert child.stdout is not None
        for line in child.stdout:
            flushed = int(line)
            if flushed >= 60:
                os.kill(child.pid, signal.SIGKILL)  # wherever it is: mid-write, mid-flush, mid-rotation
                break
    child.wait(timeout=120)
    return log, flushed


@pytest.mark.parametrize("name", FORMATS)
def test_a_killed_writer_leaves_a_log_that_replays(setup, tmp_path, name):
    ctx, records = setup
    log, flushed = run_child(tmp_path, records, name, "kill")
    parts = sorted(p for p in tmp_path.iterdir() if p.name.startswith("log-") and not p.name.startswith("."))
    outcomes = [rec for p in parts for _, rec in iter_records(p)]
    bad = [r for r in outcomes if isinstance(r, Exception)]
    # One write system call per flush: only a kill inside that call can cut the last record short, and then only
    # in the part being written; everything else is whole records.
    assert len(bad) <= (0 if name.endswith(".parquet") else 1)
    if bad:  # the cut record is the last one; the next writer to append cuts it off (it opens the part to write)
        assert isinstance(outcomes[-1], Exception)
        with LogWriter(log, max_bytes=60000) as reopened:
            reopened.write({**records[0], "id": "after-reopening"})
        assert reopened.repaired_bytes > 0
        parts = sorted(p for p in tmp_path.iterdir() if p.name.startswith("log-") and not p.name.startswith("."))
        assert not [r for p in parts for _, r in iter_records(p) if isinstance(r, Exception)]
        flushed += 1
    whole = [r for p in parts for _, r in iter_records(p) if not isinstance(r, Exception)]
    assert len(whole) >= flushed  # every flushed record is there
    assert len({r["id"] for r in whole}) == len(whole)
    totals = [replay_log(p, ctx) for p in parts]
    assert sum(t.malformed for t in totals) == 0 and sum(t.episodes for t in totals) == len(whole)


@pytest.mark.parametrize("name", ["log.jsonl", "log.jsonl.gz"])
def test_a_torn_write_is_cut_off_when_the_log_is_reopened(setup, tmp_path, name):
    ctx, records = setup
    log, _ = run_child(tmp_path, records, name, "torn")
    (part,) = [p for p in tmp_path.iterdir() if p.name.startswith("log-")]
    torn = replay_log(part, ctx)
    assert torn.malformed == 1 and torn.episodes >= 2  # the reader reads what is whole and counts the cut record
    size = part.stat().st_size
    with LogWriter(log, max_bytes=60000) as reopened:
        reopened.write(records[0])
    assert 0 < reopened.repaired_bytes < size
    after = replay_log(part, ctx)
    assert after.malformed == 0 and after.episodes == torn.episodes + 1
    if name.endswith(".gz"):
        with gzip.open(part, "rt", encoding="utf-8") as fh:
            assert all(json.loads(line) for line in fh)


def test_nothing_is_written_before_a_flush_or_a_full_buffer(setup, tmp_path):
    _, records = setup
    log = LogWriter(tmp_path / "b.jsonl", buffer_bytes=10**9)
    for r in records[:3]:
        log.write(r)
    assert not (tmp_path / "b.jsonl").exists()
    log.flush()
    first = (tmp_path / "b.jsonl").stat().st_size
    log.write(records[3])
    time.sleep(0.01)
    assert (tmp_path / "b.jsonl").stat().st_size == first
    log.close()
    assert len(episodes([tmp_path / "b.jsonl"])) == 4


def test_reopening_keeps_whole_records_and_refuses_what_a_crash_cannot_leave(setup, tmp_path):
    _, records = setup
    lines = [json.dumps(r) for r in records[:3]]
    unended = tmp_path / "unended.jsonl"  # another writer's file whose last line has no newline: kept, and closed
    unended.write_text("\n".join(lines), encoding="utf-8")
    with LogWriter(unended) as log:
        log.write(records[3])
    assert log.repaired_bytes == 0 and len(episodes([unended])) == 4
    members = tmp_path / "members.jsonl.gz"  # gzip members ending mid-line, then a whole one
    members.write_bytes(gzip.compress(lines[0].encode()) + gzip.compress(("\n" + lines[1]).encode()))
    with LogWriter(members) as log:
        log.write(records[2])
    assert [e.id for e in episodes([members])] == [r["id"] for r in records[:3]]
    not_gzip = tmp_path / "plain.jsonl.gz"
    not_gzip.write_text(lines[0] + "\n", encoding="utf-8")
    corrupt = tmp_path / "corrupt.jsonl.gz"
    whole = gzip.compress((lines[0] + "\n").encode())
    corrupt.write_bytes(whole[:12] + bytes(b ^ 0xFF for b in whole[12:30]) + whole[30:] + whole)
    for path, why in ((not_gzip, "not gzip data"), (corrupt, "corrupt gzip data")):
        before = path.read_bytes()
        log = LogWriter(path)
        log.write(records[0])
        with pytest.raises(ValueError, match=why):
            log.flush()
        assert path.read_bytes() == before  # nothing cut, nothing added
        with pytest.warns(RuntimeWarning, match="could not be written"):  # dropped with a record it cannot write
            del log
            gc.collect()


# -- several writers on one name, writers never closed, fields under other names (red-team r1, r1b, r9, r2) ------

needs_parquet = pytest.mark.skipif(not HAVE_PYARROW and not IN_CI, reason="pyarrow is not installed")


def ids_in(folder: Path) -> list[str]:
    return sorted(r["id"] for p in sorted(folder.glob("*.parquet")) for _, r in iter_records(p))


@needs_parquet
def test_a_second_parquet_writer_is_refused_and_no_part_is_ever_replaced(tmp_path, monkeypatch):
    first, second = LogWriter(tmp_path / "run.parquet"), LogWriter(tmp_path / "run.parquet")
    first.write_episode(sampled=[[5, 6]], input_ids=[1, 5, 6], loss_mask=[0, 1, 1], id="A-0")
    first.flush()
    sealed = {p: p.read_bytes() for p in tmp_path.glob("*.parquet")}
    second.write_episode(sampled=[[7, 8]], input_ids=[1, 7, 8], loss_mask=[0, 1, 1], id="B-0")
    with pytest.raises(RuntimeError, match=r"another writer .* is writing this log"):  # as JSONL: one writer a log
        second.flush()
    first.close()
    second.close()  # the lock is free now: its record goes to a part of its own
    assert ids_in(tmp_path) == ["A-0", "B-0"]
    assert all(p.read_bytes() == data for p, data in sealed.items())  # the first writer's part is as it was
    assert first.paths != second.paths and len({*first.paths, *second.paths}) == 2
    # Without a lock between them (not POSIX, a file system without flock) a sealed part still replaces nothing.
    monkeypatch.setattr(containers_module, "fcntl", None)
    folder = tmp_path / "unlocked"
    a, b = LogWriter(folder / "run.parquet"), LogWriter(folder / "run.parquet")  # both would take part 0
    for k, w in enumerate((a, b, a, b)):
        w.write_episode(sampled=[[5]], input_ids=[1, 5], loss_mask=[0, 1], id=f"{'ab'[k % 2]}-{k}")
        w.flush()
    a.close()
    b.close()
    assert ids_in(folder) == ["a-0", "a-2", "b-1", "b-3"]


RANK = """
import sys
from tito_audit.trainer.writer import LogWriter
rank, path, go, sealed = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
import pathlib, time
log = LogWriter(path)                                   # both ranks open the log before either flushes
pathlib.Path(go + str(rank)).touch()
while not all(pathlib.Path(go + str(r)).exists() for r in (0, 1)):
    time.sleep(0.01)
if rank == 1:
    while not pathlib.Path(sealed).exists():           # rank 0 has sealed its part and closed
        time.sleep(0.01)
for k in range(3):
    log.write_episode(sampled=[[5 + rank]], input_ids=[1, 5 + rank], loss_mask=[0, 1], id=f"rank{rank}-{k}")
log.close()
if rank == 0:
    pathlib.Path(sealed).touch()
"""


@needs_parquet
def test_two_processes_on_one_parquet_name_lose_nothing(tmp_path):
    log = tmp_path / "logs" / "rollouts.parquet"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [str(log), str(tmp_path / "go"), str(tmp_path / "sealed")]
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, str(r), *args], env=env) for r in (0, 1)]
    assert [p.wait(timeout=120) for p in ranks] == [0, 0]
    assert ids_in(log.parent) == [f"rank{r}-{k}" for r in (0, 1) for k in range(3)]


def test_per_rank_path_gives_each_rank_its_own_log(monkeypatch):
    assert per_rank_path("out/rollouts.jsonl.gz", 3, 8) == Path("out/rollouts.rank3.jsonl.gz")
    assert per_rank_path("out/rollouts.parquet", 0, 2) == Path("out/rollouts.rank0.parquet")
    assert per_rank_path("out/rollouts.jsonl", 0, 1) == Path("out/rollouts.jsonl")  # one process: the name given
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "6")  # what torchrun and accelerate set
    assert per_rank_path("r.ndjson") == Path("r.rank5.ndjson")


UNCLOSED = """
import gc, sys
from tito_audit.trainer.writer import LogWriter
log = LogWriter(sys.argv[1], buffer_bytes=int(sys.argv[3]))
for k in range(500):
    log.write_episode(sampled=[[5, 6]], input_ids=[1, 5, 6], loss_mask=[0, 1, 1], id=f"ep-{k}")
    if k == 99:
        log.flush()                  # e.g. once per step
if sys.argv[2] == "collected":       # dropped without close(), then collected
    del log
    gc.collect()
# else: the interpreter exits with the writer open
"""


@pytest.mark.parametrize("name", ["log.jsonl.gz", PARQUET])
@pytest.mark.parametrize("how", ["exit", "collected"])
def test_a_writer_never_closed_loses_nothing(tmp_path, name, how):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    buffer = "1500"  # records are pending, and a Parquet part is open and unsealed (the buffer filled), at the end
    done = subprocess.run(
        [sys.executable, "-c", UNCLOSED, str(tmp_path / name), how, buffer],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    parts = sorted(p for p in tmp_path.iterdir() if not p.name.startswith("."))
    ids = [r["id"] for p in parts for _, r in iter_records(p)]
    assert sorted(ids) == sorted(f"ep-{k}" for k in range(500))
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]
    warned = [line for line in done.stderr.splitlines() if "garbage-collected without close()" in line]
    assert len(warned) == (1 if how == "collected" else 0), done.stderr
    if how == "collected":
        assert "pending record(s) were written" in warned[0] and name.split(".")[0] in warned[0]


def test_batch_names_are_written_as_the_native_ones_and_an_unknown_field_is_refused(tmp_path):
    ids = [1, 2, 5, 6, 3, 7, 8]
    mask = [0, 0, 1, 1, 0, 1, 1]
    turns = [[5, 6], [7, 8]]
    given = {
        "mask": {"mask": mask},  # check_batch's alias
        "labels": {"labels": [t if m else -100 for t, m in zip(ids, mask, strict=True)]},  # Hugging Face
        "response_mask": {"response_mask": mask[2:]},  # verl: the mask over the response only
    }
    with LogWriter(tmp_path / "log.jsonl") as log:
        for name, fields in given.items():
            log.write({"sampled": turns, "input_ids": ids, "id": name, **fields})
        log.write({"turns": turns, "input_ids": ids, "prompt_ids": [[1, 2], [1, 2, 5, 6, 3]], "id": "ctx",
                   "loss_mask": mask})  # fmt: skip
        with pytest.raises(RecordError, match=r"unknown field.*'advantage'.*metadata"):
            log.write({"turns": turns, "input_ids": ids, "loss_mask": mask, "advantage": 0.5})
        with pytest.raises(RecordError, match="labels train id 9 at token 2"):
            log.write({"sampled": turns, "input_ids": ids, "labels": [-100, -100, 9, 6, -100, 7, 8]})
        with pytest.raises(RecordError, match="loss_mask and mask disagree at token 4"):
            log.write({"sampled": turns, "input_ids": ids, "loss_mask": mask, "mask": [0, 0, 1, 1, 1, 1, 1]})
    written = episodes([tmp_path / "log.jsonl"])
    assert [e.id for e in written] == [*given, "ctx"]
    assert all(e.loss_mask == mask and [t.ids for t in e.turns] == turns for e in written)
    assert [t.prompt_ids for t in written[-1].turns] == [[1, 2], [1, 2, 5, 6, 3]]


def test_padding_the_labels_train_is_written_and_replayed_as_trained(setup, tmp_path):
    """A padded item whose labels train the pads (not -100 under ``attention_mask`` 0) keeps those positions in the
    record, so replay finds them trained and never sampled instead of SAFE on a log that lost the evidence (red
    team G2)."""
    ctx, records = setup
    correct = dict(records[0])
    pad = 0
    ids, mask = correct["input_ids"], correct["loss_mask"]
    item = {k: v for k, v in correct.items() if k != "loss_mask"}
    item["input_ids"] = ids + [pad] * 8
    item["attention_mask"] = [1] * len(ids) + [0] * 8
    item["labels"] = [t if m else -100 for t, m in zip(ids, mask, strict=True)] + [pad] * 8
    with LogWriter(tmp_path / "padded.jsonl") as log:
        log.write(item)
    written = json.loads((tmp_path / "padded.jsonl").read_text())
    assert written["input_ids"] == item["input_ids"] and written["loss_mask"] == mask + [1] * 8
    before = replay_log(reference(tmp_path, [correct]), ctx).to_dict()["trained_not_sampled"]
    assert replay_log(tmp_path / "padded.jsonl", ctx).to_dict()["trained_not_sampled"] == before + 8
