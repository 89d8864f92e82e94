"""Replay Parquet shards on Ray: the local workers' function, mapped over row groups with Ray Data.

The driver reads each shard's footer and makes one item per row group (shard, group, line of its first row);
``ray.data.from_items(...).map_batches(_ReplayRowGroups)`` runs ``run._row_group_task`` on each, in actors that
load the model once, and returns the group's ``ReplayTotals``. With ``preserve_order`` the driver receives them in
shard and row order and merges them (``ReplayTotals.merge``): findings, lines and totals equal a local run's, by
construction. Each row group is read by the same reader as a local run on purpose: ``ray.data.read_parquet``
concatenates blocks of different shards under one unified schema, which gives a message a ``None`` field that its
own shard does not have, and a template renders that differently.

Memory per actor: the model (its tokenizer and template, a few hundred MB of Python) plus one row group decoded
to Arrow and one batch of 256 rows as Python objects; ``--ray-memory`` reserves it per actor. Ray is an optional
dependency (``pip install 'tito-audit[ray]'``); ``ray.init(address=...)`` joins an existing cluster
(``--ray-address``, or ``RAY_ADDRESS``), else starts a local one; the shards must be readable at the same path
from every node (a shared file system).
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
from tito_audit.replay.reader import MAX_RECORD_BYTES, LogError, expand, log_kind, open_parquet
from tito_audit.replay.run import EMPTY_LOG, _Fit, labels, stop

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


EMPTY = -1  # the row group of a shard of several that holds no row: one malformed record (``run.EMPTY_LOG``)


class _ReplayRowGroups:
    """A Ray Data actor: the model loaded once, then ``run._row_group_task`` (the local workers' function) per
    row group named in the batch."""

    def __init__(self, spec: ContextSpec, fmt: str, field_map: FieldMap | None, max_record_bytes: int) -> None:
        from tito_audit.replay.run import _init

        _init(spec.build(), fmt, field_map, max_record_bytes)

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        from tito_audit.replay.run import _row_group_task, _unreadable_task

        totals = [
            pickle.dumps(
                _unreadable_task(EMPTY_LOG, "")
                if int(group) == EMPTY
                else _row_group_task(str(path), int(group), int(first), "")
            )
            for path, group, first in zip(batch["path"], batch["group"], batch["first"], strict=True)
        ]
        return {"path": list(batch["path"]), "totals": totals}


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
    names = labels(paths)
    groups = []  # one item per row group: the shard, the group, the line of its first row
    for p in paths:
        first = 1
        meta = open_parquet(p).metadata
        for g in range(meta.num_row_groups):
            groups.append({"path": str(p), "group": g, "first": first})
            first += meta.row_group(g).num_rows
        if first == 1 and len(paths) > 1:  # a shard of several without a row: named in its place, as locally
            groups.append({"path": str(p), "group": EMPTY, "first": 1})
    if not ray.is_initialized():
        env = {k: os.environ[k] for k in _ENV if k in os.environ}
        ray.init(address=address, runtime_env={"env_vars": env} if env else None, log_to_driver=False)
    data_ctx = ray.data.DataContext.get_current()
    data_ctx.execution_options.preserve_order = True
    data_ctx.enable_progress_bars = False
    most = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
    mapped = ray.data.from_items(groups, override_num_blocks=min(len(groups), 8 * most) or 1).map_batches(
        _ReplayRowGroups,
        fn_constructor_args=(spec, fmt, field_map, max_record_bytes),
        batch_size=1,
        # an autoscaling pool that starts with one actor, so that Ray Data's own tasks always find a CPU
        compute=ray.data.ActorPoolStrategy(min_size=1, max_size=most),
        num_cpus=1,
        memory=memory,
    )
    totals = ReplayTotals()
    fit = _Fit(ctx)
    by_path = {str(p): p for p in paths}
    try:
        for row in mapped.iter_rows():
            part: ReplayTotals = pickle.loads(row["totals"])
            totals.merge(part, file=names[by_path[row["path"]]])
            fit(totals)
            if on_records is not None:
                on_records(part.records)
    except KeyboardInterrupt:
        raise stop(totals, fit) from None
    fit(totals, final=True)
    return totals
