"""Run the user's weights over the replayed episodes: log-prob attribution, estimator bias, gradient effect.

Per chunk of episodes: one set of padded no-grad forwards (``logprobs``) gives the trainer's log p at every
trained position of the trained sequences and, where the trained sequence is not the buffer, the policy's log p
at every sampled position of the buffer (what a correct loop's mismatch would be); where the sampler is known, the
same forwards' logits (and the reference's, ``--ref``) give the estimator bias at every sampled position. Then,
one episode at a time, the two gradients (``gradient``). The weights are loaded once; totals stream (constant
memory apart from one chunk).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tito_audit.policy.gradients import gather_log_softmax
from tito_audit.policy.kl_bias import position_expectations, processed_logps
from tito_audit.policy.model import VocabMap
from tito_audit.policy.view import turn_offsets
from tito_audit.replay.weights.alignment import AlignmentTotals
from tito_audit.replay.weights.attribution import AttributionTotals, EpisodeAttribution, attribute
from tito_audit.replay.weights.estimators import BiasTotals
from tito_audit.replay.weights.gradient import (
    GradientTotals,
    compare_pair,
    noise_floor,
    not_comparable,
    parameter_groups,
)
from tito_audit.replay.weights.logprobs import Row, logits_at
from tito_audit.replay.weights.pairs import Pair

CHUNK = 16  # episodes per set of batched forwards


@dataclass
class WeightsTotals:
    """Everything the weights measured, over the episodes run."""

    episodes: int = 0
    by_reference: dict[str, int] = field(default_factory=dict)
    diverged: int = 0
    not_attributed: dict[str, int] = field(default_factory=dict)
    not_attributed_first: dict[str, str] = field(default_factory=dict)
    attribution: AttributionTotals = field(default_factory=AttributionTotals)
    alignment: AlignmentTotals = field(default_factory=AlignmentTotals)
    bias: BiasTotals = field(default_factory=BiasTotals)
    gradient: GradientTotals = field(default_factory=GradientTotals)
    gradient_run: bool = True
    seconds: dict[str, float] = field(default_factory=lambda: {"forward": 0.0, "bias": 0.0, "gradient": 0.0})
    batched: bool | None = None  # the padded batches ran (False: one sequence per forward)
    per_episode: list[tuple[Pair, EpisodeAttribution]] | None = None  # kept only when asked (tests, examples)

    def skip(self, pair: Pair, why: str) -> None:
        self.not_attributed[why] = self.not_attributed.get(why, 0) + 1
        self.not_attributed_first.setdefault(why, pair.label)


@dataclass
class Policy:
    """The weights and what runs them."""

    model: Any
    vmap: VocabMap
    ref: Any | None = None
    stop_ids: Sequence[int] = ()
    gradient: bool = True
    batched: bool | None = None  # None: logprobs.batch_by_default (off the CPU, where the model takes them)
    max_positions: int | None = None

    @classmethod
    def of(cls, model: Any, vmap: VocabMap, ref: Any | None = None, **kw: Any) -> Policy:
        model.eval()
        if ref is not None:
            ref.eval()
            for p in ref.parameters():
                p.requires_grad_(False)
        limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        return cls(model, vmap, ref, max_positions=int(limit) if isinstance(limit, int) else None, **kw)


def _forward_chunk(
    policy: Policy, pairs: Sequence[Pair], totals: WeightsTotals
) -> list[tuple[dict[int, float], list[float], dict[int, float] | None]]:
    """Per pair: the trainer's log p at its trained positions, the correct loop's Delta at the buffer's sampled
    positions (policy log p minus the engine's), and, under a sampler that is not pure, the trainer's log q at its
    trained positions; the estimator bias is added to ``totals``."""
    rows: list[Row] = []
    owner: list[tuple[int, str]] = []  # (pair index, "trained" | "buffer")
    for n, pair in enumerate(pairs):
        rows.append(Row(pair.trained_ids, pair.trained_positions))
        owner.append((n, "trained"))
        if not pair.same_input:
            rows.append(Row(pair.buffer_ids, pair.sampled_positions))
            owner.append((n, "buffer"))
    bias_rows = {
        i for i, (n, kind) in enumerate(owner)
        if pairs[n].settings is not None and (kind == "buffer" or pairs[n].same_input)
    }  # fmt: skip
    logps: list[torch.Tensor] = [torch.zeros(0) for _ in rows]
    processed: dict[int, dict[int, float]] = {}  # pair index -> trained position -> log q under its sampler
    for idx, logits in logits_at(policy.model, policy.vmap, rows, batched=policy.batched):
        y = torch.tensor([t for i in idx for t in policy.vmap.to_model([rows[i].ids[j] for j in rows[i].positions])])
        lp = gather_log_softmax(logits, y.to(logits.device)).cpu()
        at, starts = 0, {}
        for i in idx:
            starts[i] = at
            logps[i] = lp[at : at + len(rows[i].positions)]
            at += len(rows[i].positions)
        for i in idx:
            n, kind = owner[i]
            settings = pairs[n].settings
            if kind == "trained" and settings is not None and not settings.pure and rows[i].positions:
                part = logits[starts[i] : starts[i] + len(rows[i].positions)]
                processed[n] = _processed(policy, pairs[n], rows[i], part)
        wanted = [i for i in idx if i in bias_rows]
        if wanted:
            started = time.perf_counter()
            _bias(
                policy,
                pairs,
                owner,
                rows,
                wanted,
                {i: logits[starts[i] : starts[i] + len(rows[i].positions)] for i in wanted},
                totals.bias,
            )
            totals.seconds["bias"] += time.perf_counter() - started
    out = []
    for n, pair in enumerate(pairs):
        trained = dict(zip(pair.trained_positions, logps[owner.index((n, "trained"))].tolist(), strict=True))
        if pair.same_input:
            on_buffer = trained
        else:
            on_buffer = dict(zip(pair.sampled_positions, logps[owner.index((n, "buffer"))].tolist(), strict=True))
        deltas = [
            on_buffer[j] - float(e)
            for j in pair.sampled_positions
            if (e := pair.engine_logprobs[j]) is not None and j in on_buffer
        ]
        out.append((trained, deltas, processed.get(n)))
    return out


def _processed(policy: Policy, pair: Pair, row: Row, logits: torch.Tensor) -> dict[int, float]:
    """The policy's log q of each trained token under the pair's sampler (the alignment's ``processed`` hypothesis)."""
    assert pair.settings is not None
    steps, prompts = turn_offsets(pair.spans, row.positions)
    tokens = policy.vmap.to_model([row.ids[j] for j in row.positions])
    q = processed_logps(logits, tokens, pair.settings, steps, prompts, policy.vmap, policy.stop_ids)
    return dict(zip(row.positions, q.tolist(), strict=True))


def _bias(
    policy: Policy,
    pairs: Sequence[Pair],
    owner: Sequence[tuple[int, str]],
    rows: Sequence[Row],
    wanted: Sequence[int],
    logits: dict[int, torch.Tensor],
    bias: BiasTotals,
) -> None:
    """The estimator expectations at the sampled positions of ``wanted`` rows (the reference run on them in one
    batch)."""
    ref_logits: dict[int, torch.Tensor] = {}
    if policy.ref is not None:
        sub = [rows[i] for i in wanted]
        for idx, lr in logits_at(policy.ref, policy.vmap, sub, batched=policy.batched):
            at = 0
            for k in idx:
                n = len(sub[k].positions)
                ref_logits[wanted[k]] = lr[at : at + n]
                at += n
    for i in wanted:
        pair = pairs[owner[i][0]]
        assert pair.settings is not None
        steps, prompts = turn_offsets(pair.spans, rows[i].positions)
        found = position_expectations(
            logits[i], ref_logits.get(i), pair.settings, steps, prompts, policy.vmap, policy.stop_ids
        )
        bias.add(found)


def _why_not(policy: Policy, pair: Pair) -> str | None:
    if not pair.built:
        return pair.why_not
    if not pair.trained_positions:
        return "nothing trained: no loss_mask 1 after the first id"
    longest = max(len(pair.trained_ids), len(pair.buffer_ids))
    if policy.max_positions is not None and longest > policy.max_positions:
        return f"longer than the model's max_position_embeddings ({policy.max_positions})"
    return None


def analyze_pairs(
    pairs: Iterable[Pair],
    policy: Policy,
    *,
    keep: bool = False,
    on_episode: Callable[[int], None] | None = None,
) -> WeightsTotals:
    """Attribution, estimator bias and gradient comparison over ``pairs`` (streamed in chunks)."""
    totals = WeightsTotals(gradient_run=policy.gradient, per_episode=[] if keep else None)
    groups = parameter_groups(policy.model) if policy.gradient else []
    for chunk in _chunks(pairs, CHUNK):
        live: list[Pair] = []
        for pair in chunk:
            totals.episodes += 1
            totals.by_reference[pair.reference] = totals.by_reference.get(pair.reference, 0) + 1
            totals.diverged += pair.diverged
            bias = totals.bias
            if pair.settings is None:
                bias.unknown += 1
                if pair.settings_error is not None:
                    bias.refused += 1
                    bias.refused_example = bias.refused_example or f"{pair.label}: {pair.settings_error}"
            else:
                bias.settings[pair.settings.describe()] += 1
                bias.sources[pair.settings_source] += 1
                bias.pure = bias.pure and pair.settings.pure
            if pair.settings_conflict is not None:
                bias.conflicts[pair.settings_conflict] += 1
                bias.conflict_first.setdefault(pair.settings_conflict, pair.label)
            why = _why_not(policy, pair)
            if why is not None:
                totals.skip(pair, why)
                if policy.gradient:
                    totals.gradient.skip(pair, why)
                continue
            live.append(pair)
        if not live:
            continue
        started, before = time.perf_counter(), totals.seconds["bias"]
        results = _forward_chunk(policy, live, totals)
        totals.seconds["forward"] += time.perf_counter() - started - (totals.seconds["bias"] - before)
        for pair, (trained, deltas, processed) in zip(live, results, strict=True):
            a = attribute(pair, trained)
            totals.attribution.add(a, deltas)
            totals.alignment.add(pair, trained, processed)
            if totals.per_episode is not None:
                totals.per_episode.append((pair, a))
        if policy.gradient:
            started = time.perf_counter()
            for pair in live:
                why = not_comparable(pair)
                if why is not None:
                    totals.gradient.skip(pair, why)
                    continue
                if totals.gradient.noise_floor is None:
                    totals.gradient.noise_floor = noise_floor(policy.model, policy.vmap, pair)
                totals.gradient.add(pair, compare_pair(policy.model, policy.vmap, pair), groups)
            totals.seconds["gradient"] += time.perf_counter() - started
        if on_episode is not None:
            on_episode(len(chunk))
    totals.bias.with_reference = policy.ref is not None
    totals.batched = policy.batched if policy.batched is not None else _probed(policy)
    return totals


def _probed(policy: Policy) -> bool:
    from tito_audit.replay.weights.logprobs import batch_by_default

    return batch_by_default(policy.model, policy.vmap)


def _chunks(items: Iterable[Pair], n: int) -> Iterator[list[Pair]]:
    chunk: list[Pair] = []
    for x in items:
        chunk.append(x)
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
