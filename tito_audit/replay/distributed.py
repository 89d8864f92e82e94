"""Replay Parquet shards on Ray: the same per-batch function as a local run, mapped with Ray Data.

``ray.data.read_parquet(paths, include_paths=True)`` reads the shards where Ray schedules it;
``map_batches(_ReplayBatches, batch_format="pyarrow")`` runs ``run.replay_batch`` on each batch in actors that load
the model once; each output row is the ``ReplayTotals`` of one run of consecutive rows of one shard, their lines
counted from 1. With ``preserve_order`` the driver receives them in shard and row order, gives each its line
offset in its shard, and merges them (``ReplayTotals.merge``): findings, lines and totals equal a local run's.

Memory per actor: the model's tokenizer (tens of MB) plus one Ray block of the shard decoded to Arrow (about the
shard's uncompressed size divided by its row groups); ``--ray-memory`` reserves it per actor. Ray is an optional
dependency (``pip install 'tito-audit[ray]'``); ``ray.init(address=...)`` joins an existing cluster
(``--ray-address``, or ``RAY_ADDRESS``), else starts a local one.
"""

from __future__ import annotations

import datetime as dt
import os
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tito_audit.replay.aggregate import ReplayTotals
from tito_audit.replay.analyze import ReplayContext
from tito_audit.replay.mapping import FieldMap
from tito_audit.replay.reader import MAX_RECORD_BYTES, LogError, expand, log_kind
from tito_audit.replay.run import _Fit, labels

# Passed on to the actors, so that they load the model the way the driver did.
_ENV = ("HF_HUB_CACHE", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "PYTHONPATH")


@dataclass(frozen=True)
class ContextSpec:
    """How to build the ``ReplayContext`` in another process: the model spec and the replay's switches."""

    model: str
    offline: bool = False
    whatif: bool = True
    drift: bool = True
    noncanonical: bool = True
    date: dt.datetime | None = None
    chat_template_file: str | None = None

    def build(self) -> ReplayContext:
        from tito_audit.sources.load import load

        loaded = load(self.model, offline=self.offline, chat_template_file=self.chat_template_file)
        return ReplayContext.from_model(
            loaded, self.whatif, drift=self.drift, noncanonical=self.noncanonical, date=self.date
        )


class _ReplayBatches:
    """A Ray Data actor: the model loaded once, then ``replay_batch`` per run of rows of one shard."""

    def __init__(self, spec: ContextSpec, fmt: str, field_map: FieldMap | None, max_record_bytes: int) -> None:
        self.ctx = spec.build()
        self.fmt, self.map, self.bound = fmt, field_map, max_record_bytes

    def __call__(self, table: Any) -> dict[str, list[Any]]:
        from tito_audit.replay.run import replay_batch

        out: dict[str, list[Any]] = {"path": [], "rows": [], "totals": []}
        paths = table.column("path").to_pylist()
        data = table.drop_columns(["path"])
        start = 0
        while start < len(paths):
            end = start
            while end < len(paths) and paths[end] == paths[start]:
                end += 1
            part = ReplayTotals()
            done = 0  # lines are counted from the run's first row; the driver shifts them into the shard
            for batch in data.slice(start, end - start).combine_chunks().to_batches():
                part.merge(replay_batch(batch, done + 1, self.ctx, self.fmt, self.map, "", self.bound))
                done += batch.num_rows
            out["path"].append(paths[start])
            out["rows"].append(end - start)
            out["totals"].append(pickle.dumps(part))
            start = end
        return out


def replay_ray(
    specs: Sequence[str | Path],
    spec: ContextSpec,
    ctx: ReplayContext,
    *,
    fmt: str = "auto",
    field_map: FieldMap | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
    address: str | None = None,
    actors: int | None = None,
    memory: float | None = None,
    on_records: Callable[[int], None] | None = None,
) -> ReplayTotals:
    """Totals over Parquet shards, computed on Ray; ``ctx`` (the driver's) checks the tokenizer fit."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise LogError("--engine ray needs Ray Data (pip install 'tito-audit[ray]')") from None
    paths = expand(list(specs))
    not_parquet = [str(p) for p in paths if log_kind(p) != "parquet"]
    if not_parquet:
        raise LogError(f"{not_parquet[0]}: --engine ray reads Parquet shards (use the local engine for JSONL)")
    names = {os.path.abspath(p): label for p, label in labels(paths).items()}
    if not ray.is_initialized():
        env = {k: os.environ[k] for k in _ENV if k in os.environ}
        ray.init(address=address, runtime_env={"env_vars": env} if env else None, log_to_driver=False)
    data_ctx = ray.data.DataContext.get_current()
    data_ctx.execution_options.preserve_order = True
    data_ctx.enable_progress_bars = False
    ds = ray.data.read_parquet([str(p) for p in paths], include_paths=True)
    mapped = ds.map_batches(
        _ReplayBatches,
        fn_constructor_args=(spec, fmt, field_map, max_record_bytes),
        batch_format="pyarrow",
        concurrency=actors or max(1, int(ray.available_resources().get("CPU", 1))),
        memory=memory,
    )
    totals = ReplayTotals()
    seen: dict[str, int] = {}
    fit = _Fit(ctx)
    for row in mapped.iter_rows():
        path = os.path.abspath(_local(row["path"]))
        part: ReplayTotals = pickle.loads(row["totals"])
        file = names.get(path, Path(path).name)
        totals.merge(part, seen.get(path, 0), file=file)
        seen[path] = seen.get(path, 0) + int(row["rows"])
        fit(totals)
        if on_records is not None:
            on_records(int(row["rows"]))
    fit(totals, final=True)
    return totals


def _local(path: str) -> str:
    """A shard path as Ray reports it, without a ``file://`` scheme (other schemes stay as they are)."""
    return path[len("file://") :] if path.startswith("file://") else path
