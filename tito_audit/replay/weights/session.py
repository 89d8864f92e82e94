"""``replay --weights``: load the weights once, pick the episodes, run them, and hand the figures to the report.

Loading follows ``tito-audit rl --weights`` (``rl.model.load_weights``: a local folder or a Hub id, float32 by
default, rows past the tokenizer never sampled, a ``--save-policy`` folder's vocabulary map); ``--ref`` must map
the same rows to the same ids. Torch threads are capped as ``rl`` caps them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tito_audit.errors import UsageError
from tito_audit.policy.generation import GenerationSettings
from tito_audit.replay.analyze import analyze
from tito_audit.replay.context import ReplayContext
from tito_audit.replay.mapping import FieldMap
from tito_audit.replay.reader import MAX_RECORD_BYTES
from tito_audit.replay.weights.pairs import build_pair, tito_only, with_settings
from tito_audit.replay.weights.report import DEFAULT_THRESHOLD, Setup
from tito_audit.replay.weights.run import Policy, WeightsTotals, analyze_pairs
from tito_audit.replay.weights.select import select_episodes

DEFAULT_MAX_EPISODES = 128


@dataclass
class WeightsOptions:
    weights: str
    ref: str | None = None
    sampling: GenerationSettings | None = None
    device: str = "auto"
    dtype: str = "float32"
    max_episodes: int = DEFAULT_MAX_EPISODES  # 0: every episode
    gradient: bool = True
    threshold: float = DEFAULT_THRESHOLD


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """transformers' "Loading weights" bar would land in the middle of the report's stderr."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_policy(opts: WeightsOptions, tokenizer_size: int, stop_ids: Sequence[int]) -> tuple[Policy, Setup]:
    """The weights (and reference) on the device; ``UsageError`` / ``ModelNotFound`` in one line."""
    from tito_audit.policy.model import cap_threads, load_weights, resolve_device, torch_dtype

    try:
        device = resolve_device(opts.device)
    except UsageError as exc:
        raise UsageError("replay", exc.cause) from None
    dtype = torch_dtype(opts.dtype)
    with _quiet_loading():
        model, vmap = load_weights(opts.weights, device, tokenizer_size, dtype)
        ref = None
        if opts.ref:
            ref, ref_vmap = load_weights(opts.ref, device, tokenizer_size, dtype)
            if ref_vmap.model_to_tok != vmap.model_to_tok or ref_vmap.size != vmap.size:
                raise UsageError(
                    opts.ref, "--ref has another vocabulary than --weights (its rows map to other token ids)"
                )
    parameters = sum(p.numel() for p in model.parameters())
    cap_threads(device, parameters)
    policy = Policy.of(model, vmap, ref, stop_ids=list(stop_ids), gradient=opts.gradient)
    setup = Setup(
        weights=opts.weights,
        ref=opts.ref,
        device=str(device),
        dtype=opts.dtype,
        parameters=parameters,
        max_episodes=opts.max_episodes,
        threshold=opts.threshold,
    )
    return policy, setup


def run_weights(
    logs: Sequence[str | Path],
    ctx: ReplayContext,
    opts: WeightsOptions,
    *,
    fmt: str = "auto",
    field_map: FieldMap | None = None,
    max_record_bytes: int = MAX_RECORD_BYTES,
    log_episodes: int = 0,
    log_diverged: int | None = None,
    on_episode: Callable[[int], None] | None = None,
) -> tuple[WeightsTotals, Setup]:
    """Load the weights, select the episodes (``opts.max_episodes``: the diverged ones first), run them.
    ``log_episodes`` / ``log_diverged``: the replay's counts over the whole log, for "N of M measured"."""
    policy, setup = load_policy(opts, ctx.vocab_size or 0, ctx.stop_ids)
    setup.log_episodes, setup.log_diverged = log_episodes, log_diverged
    check = tito_only(ctx)
    chosen = select_episodes(
        logs, ctx, fmt=fmt, field_map=field_map, max_episodes=opts.max_episodes, max_record_bytes=max_record_bytes,
        diverged=lambda ep: analyze(ep, check).diverged,
    )  # fmt: skip
    pairs = (with_settings(build_pair(s.episode, check), opts.sampling, s.sampling) for s in chosen)
    return analyze_pairs(pairs, policy, on_episode=on_episode), setup
