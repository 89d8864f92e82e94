"""Replay real rollout logs, offline, against what a correct TITO loop holds.

    from tito_audit.replay import replay_log, ReplayContext
    totals = replay_log(Path("rollouts.jsonl"), ReplayContext.from_model(load("Qwen/Qwen3-0.6B")))

One concept per module: ``schema`` (the native record), ``reader`` (bounded streaming of JSONL/gz/Parquet),
``mapping`` (``--map``), ``log_formats/`` (native, vLLM, SkyRL: one module each) and ``adapters`` (detecting a
record's format), ``compare`` and ``divergence`` (token-level comparison and classes), ``engine`` (the engine's
prompts as the reference), ``drift`` (the loop's context against the template's), ``columns`` (the engine check on
Arrow buffers), ``context`` (what replay needs from the model), ``analyze`` (one episode), ``aggregate`` (the
streamed totals), ``report`` (the checks and the report; the verdict's rule is ``tito_audit.report.loop_verdict``),
``run`` (whole logs, with
workers), ``distributed`` (Parquet shards on Ray), ``record`` (writing native records from a ``Trajectory``),
``weights/`` (``--weights``: what the log's divergences do to the policy's log-probs and gradient). What runs
inside a trainer (the run-time guard, ``LogWriter``) is ``tito_audit.trainer``.

Each public name is imported from its module on first use, so that importing a light part of the package (the
log formats, which ``tito-audit --help`` lists) does not import the comparison machinery (transformers, numpy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tito_audit.registry import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "ADAPTERS": "tito_audit.replay.adapters",
    "detect": "tito_audit.replay.adapters",
    "to_episodes": "tito_audit.replay.adapters",
    "ReplayTotals": "tito_audit.replay.aggregate",
    "build_report": "tito_audit.replay.report",
    "EpisodeResult": "tito_audit.replay.analyze",
    "ReplayContext": "tito_audit.replay.context",
    "analyze": "tito_audit.replay.analyze",
    "FieldMap": "tito_audit.replay.mapping",
    "MapError": "tito_audit.replay.mapping",
    "LogError": "tito_audit.replay.reader",
    "iter_records": "tito_audit.replay.reader",
    "record_from_trajectory": "tito_audit.replay.record",
    "TokenizerMismatch": "tito_audit.replay.run",
    "replay_batch": "tito_audit.replay.run",
    "replay_log": "tito_audit.replay.run",
    "Episode": "tito_audit.replay.schema",
    "RecordError": "tito_audit.replay.schema",
    "SampledTurn": "tito_audit.replay.schema",
    "episode_from_native": "tito_audit.replay.schema",
}

if TYPE_CHECKING:
    from tito_audit.replay.adapters import ADAPTERS, detect, to_episodes
    from tito_audit.replay.aggregate import ReplayTotals
    from tito_audit.replay.analyze import EpisodeResult, analyze
    from tito_audit.replay.context import ReplayContext
    from tito_audit.replay.mapping import FieldMap, MapError
    from tito_audit.replay.reader import LogError, iter_records
    from tito_audit.replay.record import record_from_trajectory
    from tito_audit.replay.report import build_report
    from tito_audit.replay.run import TokenizerMismatch, replay_batch, replay_log
    from tito_audit.replay.schema import Episode, RecordError, SampledTurn, episode_from_native


__getattr__ = lazy_exports(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


__all__ = [
    "ADAPTERS",
    "Episode",
    "EpisodeResult",
    "FieldMap",
    "LogError",
    "MapError",
    "RecordError",
    "ReplayContext",
    "ReplayTotals",
    "SampledTurn",
    "TokenizerMismatch",
    "analyze",
    "build_report",
    "detect",
    "episode_from_native",
    "iter_records",
    "record_from_trajectory",
    "replay_batch",
    "replay_log",
    "to_episodes",
]
