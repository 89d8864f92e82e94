"""Replay real rollout logs against what a correct TITO loop holds, and guard a trainer at run time.

    from tito_audit.replay import replay_log, ReplayContext, check_batch
    totals = replay_log(Path("rollouts.jsonl"), ReplayContext.from_model(load("Qwen/Qwen3-0.6B")))

One concept per module: ``schema`` (the native record), ``reader`` (bounded streaming of JSONL/gz/Parquet),
``mapping`` (``--map``), ``adapters`` (vLLM, SkyRL), ``compare`` and ``divergence`` (token-level comparison and
classes), ``engine`` (the engine's prompts as the reference), ``drift`` (the loop's context against the
template's), ``columns`` (the engine check on Arrow buffers), ``analyze`` (one episode), ``aggregate`` (totals,
verdict and the report), ``run`` (whole logs, with workers), ``distributed`` (Parquet shards on Ray), ``guard``
(the run-time check), ``record`` (writing native records from a ``Trajectory``), ``writer``
(``LogWriter``: native records from any loop, to JSONL, gzip JSONL or Parquet).
"""

from tito_audit.replay.adapters import ADAPTERS, detect, to_episodes
from tito_audit.replay.aggregate import ReplayTotals, build_report
from tito_audit.replay.analyze import EpisodeResult, ReplayContext, analyze
from tito_audit.replay.guard import GuardFailure, GuardResult, TitoGuardError, check_batch
from tito_audit.replay.mapping import FieldMap, MapError
from tito_audit.replay.reader import LogError, iter_records
from tito_audit.replay.record import record_from_trajectory
from tito_audit.replay.run import TokenizerMismatch, replay_batch, replay_log
from tito_audit.replay.schema import Episode, RecordError, SampledTurn, episode_from_native
from tito_audit.replay.writer import LogWriter

__all__ = [
    "ADAPTERS",
    "Episode",
    "EpisodeResult",
    "FieldMap",
    "GuardFailure",
    "GuardResult",
    "LogError",
    "LogWriter",
    "MapError",
    "RecordError",
    "ReplayContext",
    "ReplayTotals",
    "SampledTurn",
    "TitoGuardError",
    "TokenizerMismatch",
    "analyze",
    "build_report",
    "check_batch",
    "detect",
    "episode_from_native",
    "iter_records",
    "record_from_trajectory",
    "replay_batch",
    "replay_log",
    "to_episodes",
]
