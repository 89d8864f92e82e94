"""Per episode, the two sequences the weights are run on: what the trainer trained on, and what a correct loop
holds (the reference replay compares it with), with the engine's log-probs and the contexts the engine sampled in.

The reference is replay's own (``tito_audit.replay.engine`` / ``analyze.rebuild_buffer``):
- the engine's prompts (every turn has ``prompt_ids``): the buffer a correct loop holds is built from them, and
  turn k was sampled in ``prompt_ids[k]``, exactly what the engine was given;
- the template's rebuilt buffer (messages, no prompt ids): turn k was sampled in the buffer up to its ids
  (nothing else in the log says what the engine saw);
- neither: the context the engine sampled in is unknown. No buffer is built, and the episode is named as such
  (no log-prob attribution, no gradient comparison), never compared against a guess.

Both sequences are cut after their last trained (sampled) id: under a causal model nothing after it changes a
log-prob or the gradient, and a correct loop then gives two identical inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.policy.generation import GenerationSettings
from tito_audit.replay.analyze import analyze, rebuild_buffer
from tito_audit.replay.context import ReplayContext
from tito_audit.replay.engine import engine_buffer, has_engine_prompts
from tito_audit.replay.schema import Episode
from tito_audit.rollout.bridge import AppendRefused

NO_CONTEXT = (
    "the log has neither the engine's prompt_ids nor the messages: the context the engine sampled in is unknown"
)


@dataclass
class Pair:
    """One episode's trained sequence and reference buffer (plain data)."""

    line: int
    id: str
    file: str
    trained_ids: list[int]
    trained_mask: list[int]
    reference: str = "sampled"  # "engine", "buffer", or "sampled" (nothing built)
    buffer_ids: list[int] = field(default_factory=list)
    buffer_mask: list[int] = field(default_factory=list)
    engine_logprobs: list[float | None] = field(default_factory=list)  # per buffer position (sampled ones)
    spans: list[tuple[int, int]] = field(default_factory=list)  # sampled runs of the buffer, per turn
    # per turn: the sequence the engine sampled the turn in (its context + its ids) and the turn's log-probs
    sampled: list[tuple[list[int], int, list[float] | None]] = field(default_factory=list)
    why_not: str | None = None  # the buffer could not be built (then no attribution and no gradient)
    diverged: bool = False  # replay's own verdict on the episode (replay_divergence)
    first_class: str | None = None  # the class of its first divergence
    settings: GenerationSettings | None = None
    settings_source: str = ""  # "--sampling", "log", or "" (unknown)
    settings_error: str | None = None  # the record's sampling object could not be used
    settings_conflict: tuple[str, str] | None = None  # (--sampling, the record's) when they differ

    @property
    def label(self) -> str:
        where = f"{self.file} line {self.line}" if self.file else f"line {self.line}"
        return where + (f" ({self.id})" if self.id else "")

    @property
    def built(self) -> bool:
        return self.why_not is None

    @property
    def trained_positions(self) -> list[int]:
        """Positions with a trainer log-prob: trained (mask 1), and not the first id (nothing predicts it)."""
        return [j for j, m in enumerate(self.trained_mask) if m and j > 0]

    @property
    def sampled_positions(self) -> list[int]:
        return [j for a, b in self.spans for j in range(max(a, 1), b)]

    @property
    def same_input(self) -> bool:
        """The trainer's input is the buffer: same ids, same mask (a correct loop)."""
        return self.built and self.trained_ids == self.buffer_ids and self.trained_mask == self.buffer_mask


def _cut(ids: list[int], mask: list[int]) -> tuple[list[int], list[int]]:
    last = max((j for j, m in enumerate(mask) if m), default=-1)
    return ids[: last + 1], mask[: last + 1]


def tito_only(ctx: ReplayContext) -> ReplayContext:
    """The context for replay's own divergence check alone (no what-if, drift or non-canonical work)."""
    return dataclasses.replace(ctx, whatif=False, drift=False, noncanonical=False)


def build_pair(ep: Episode, ctx: ReplayContext) -> Pair:
    """The pair for one episode; ``ctx`` should be ``tito_only`` (replay's divergence verdict is recomputed)."""
    mask = ep.loss_mask if ep.loss_mask is not None and len(ep.loss_mask) == len(ep.input_ids) else None
    pair = Pair(ep.line, ep.id, ep.file, *_cut(ep.input_ids, mask or [0] * len(ep.input_ids)))
    res = analyze(ep, ctx)
    pair.diverged = res.diverged
    pair.first_class = res.divergences[0].cls if res.divergences else None
    if mask is None:
        pair.why_not = (
            "no loss_mask: which tokens the trainer trained is unknown"
            if ep.loss_mask is None
            else f"loss_mask has {len(ep.loss_mask)} values for {len(ep.input_ids)} input_ids"
        )
        return pair
    if res.error is not None:
        pair.why_not = res.error
        return pair
    if has_engine_prompts(ep):
        buf = engine_buffer(ep, decode=None, stop_ids=ctx.stop_ids, special_ids=ctx.special_ids)
        ids, bmask, lps, spans = buf.ids, buf.mask, buf.logprobs, buf.spans
        pair.reference = "engine"
        for t in ep.turns:
            assert t.prompt_ids is not None
            lp = t.logprobs if t.logprobs is not None and len(t.logprobs) == len(t.ids) else None
            pair.sampled.append(([*t.prompt_ids, *t.ids], len(t.prompt_ids), lp))
    elif ep.messages is not None:
        try:
            traj, _notes = rebuild_buffer(ep, ctx)
        except (RenderError, AppendRefused, ValueError) as exc:
            pair.why_not = f"reference buffer not rebuilt: {type(exc).__name__}: {exc}"
            return pair
        ids, bmask, lps, spans = traj.input_ids, traj.loss_mask, traj.logprobs, traj.sampled_spans()
        pair.reference = "buffer"
        for a, b in spans:
            run = lps[a:b]
            pair.sampled.append((ids[:b], a, None if any(x is None for x in run) else [float(x) for x in run]))  # type: ignore[arg-type]
    else:
        pair.why_not = NO_CONTEXT
        return pair
    end = spans[-1][1] if spans else 0
    pair.buffer_ids, pair.buffer_mask = list(ids[:end]), list(bmask[:end])
    pair.engine_logprobs = list(lps[:end])
    pair.spans = list(spans)
    return pair


def with_settings(pair: Pair, cli: GenerationSettings | None, record_sampling: Any) -> Pair:
    """The sampler for this episode. The record's own ``sampling`` object wins where it has one: it is what the
    engine drew with, and ``--sampling`` is the user's belief about it. When both are given and differ, the record's
    is used and the contradiction is kept (``settings_conflict``), reported by ``replay_kl_estimators``. A record
    whose object cannot be modelled leaves the sampler unknown (``--sampling`` does not stand in for what the log
    says the engine did). ``--sampling`` applies to records without one."""
    from tito_audit.replay.weights.sampler import SamplingError, parse_sampling

    if record_sampling is not None:
        try:
            logged = parse_sampling(record_sampling)
        except SamplingError as exc:
            pair.settings_error = f"the record's sampling object: {exc}"
            return pair
        pair.settings, pair.settings_source = logged, "log"
        if cli is not None and cli != logged:
            pair.settings_conflict = (cli.describe(), logged.describe())
    elif cli is not None:
        pair.settings, pair.settings_source = cli, "--sampling"
    return pair
