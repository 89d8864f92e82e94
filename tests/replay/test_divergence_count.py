"""One divergence is reported once: after a turn diverges, every later turn is judged on its own.

Each log here holds the engine's ``prompt_ids`` for every turn (the engine's prompts are the reference). A loop
that re-encodes a non-canonically sampled turn feeds the engine, and trains on, other ids for that turn from
then on; replay must name that turn, and only it, however many turns follow, while a change the loop makes to a
later turn must still be named. The conversations are rendered from the shared models' own templates and
tokenizers (BPE and SentencePiece), and the sampled ids are their canonical encodings with one token split.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tito_audit.replay.analyze import ReplayContext, analyze
from tito_audit.replay.schema import episode_from_native
from tito_audit.testing.synthetic import Splitter

MODELS = ["Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "google/gemma-2-2b-it"]
MESSAGES = [
    {"role": "user", "content": "Plan a weekend trip for me."},
    {"role": "assistant", "content": "Paris would be lovely in spring, with long walks along the Seine."},
    {"role": "user", "content": "What about the weather?"},
    {"role": "assistant", "content": "The forecast for Paris is sunny and warm today. Let me look at Oslo next."},
    {"role": "user", "content": "And Oslo?"},
    {"role": "assistant", "content": "Oslo will be cool and rainy, so pack a jacket."},
]


@dataclass
class Rollout:
    """A correct loop's pieces: the first prompt, each turn's sampled ids, and the deltas between the turns."""

    prompt: list[int]
    sampled: list[list[int]]
    deltas: list[list[int]]  # deltas[k] follows turn k


def rollout(ctx: ReplayContext) -> Rollout:
    """The canonical ids of ``MESSAGES`` cut where the template's renders say: each assistant turn up to and with
    its stop token is sampled, the rest is the environment's delta."""
    r = ctx.renderer
    assistants = [i for i, m in enumerate(MESSAGES) if m["role"] == "assistant"]
    heads = [r.render_ids(MESSAGES[:a], add_generation_prompt=True) for a in assistants]
    fulls = [r.render_ids(MESSAGES[: a + 1]) for a in assistants]
    sampled, deltas = [], []
    for k, (head, full) in enumerate(zip(heads, fulls, strict=True)):
        assert full[: len(head)] == head, "the template does not extend the prompt with the assistant turn"
        stop = next(n for n in range(len(head), len(full)) if full[n] in ctx.stop_ids)
        sampled.append(full[len(head) : stop + 1])
        if k + 1 < len(heads):
            nxt = heads[k + 1]
            assert nxt[: stop + 1] == full[: stop + 1], "the template rewrites history for the next message"
            deltas.append(nxt[stop + 1 :])
    assert all(deltas) and all(len(s) > 6 for s in sampled)
    return Rollout(heads[0], sampled, deltas)


def split_one(ctx: ReplayContext, ids: list[int], *, last: bool = False) -> list[int]:
    """``ids`` with one token (the first splittable one, or the last id when ``last``) spelled by two ids of the
    vocabulary: the same text, what a sampler can emit instead."""
    split = Splitter(ctx.renderer.tokenizer)
    order = [len(ids) - 1] if last else range(len(ids))
    at = next(n for n in order if ids[n] not in ctx.stop_ids and split(ids[n]) is not None)
    pair = split(ids[at])
    assert pair is not None
    out = [*ids[:at], *pair, *ids[at + 1 :]]
    assert ctx.decode(out) == ctx.decode(ids) and out != ids
    return out


def reencoded(ctx: ReplayContext, ids: list[int], canonical: list[int]) -> list[int]:
    """What a loop that decodes and re-encodes a turn keeps of it (checked to be the canonical ids)."""
    again = ctx.renderer.encode(ctx.decode(ids))
    assert again == canonical, "re-encoding does not give the canonical ids back"
    return again


def record(ro: Rollout, sampled: list[list[int]], fed: list[list[int]], trained: str) -> dict:
    """The log of a loop that samples ``sampled`` and puts ``fed[k]`` in its context for turn k (the engine's later
    prompts hold it); it trains on its last prompt plus the last sampled ids (``trained="context"``, mask 1 on
    what it holds for each turn) or on the sampled ids in the correct buffer (``trained="sampled"``)."""
    prompts, ctx_ids, ctx_mask = [], list(ro.prompt), [0] * len(ro.prompt)
    buf, mask = list(ro.prompt), [0] * len(ro.prompt)
    for k, ids in enumerate(sampled):
        prompts.append(list(ctx_ids))
        ctx_ids += fed[k]
        ctx_mask += [1] * len(fed[k])
        buf += ids
        mask += [1] * len(ids)
        if k < len(ro.deltas):
            ctx_ids += ro.deltas[k]
            ctx_mask += [0] * len(ro.deltas[k])
            buf += ro.deltas[k]
            mask += [0] * len(ro.deltas[k])
    turns = [{"ids": ids, "prompt_ids": p} for ids, p in zip(sampled, prompts, strict=True)]
    if trained == "context":
        return {"id": "ep", "turns": turns, "input_ids": ctx_ids, "loss_mask": ctx_mask}
    return {"id": "ep", "turns": turns, "input_ids": buf, "loss_mask": mask}


@pytest.fixture(scope="module", params=MODELS)
def model(request, loaded):
    ctx = ReplayContext.from_model(loaded(request.param), False, drift=False)
    return ctx, rollout(ctx)


def diverged(ctx: ReplayContext, rec: dict) -> list[tuple[int, str]]:
    res = analyze(episode_from_native(rec), ctx)
    assert res.reference == "engine" and res.error is None and not res.shape
    return [(d.turn, d.cls) for d in res.divergences]


def test_a_correct_loop_on_these_rollouts_is_exact(model):
    ctx, ro = model
    assert diverged(ctx, record(ro, ro.sampled, ro.sampled, "context")) == []


@pytest.mark.parametrize("turn", [0, 1])
def test_a_reencoded_turn_is_one_divergence_whatever_follows(model, turn):
    """The loop re-encodes one non-canonical turn, feeds the engine the re-encoding and trains on it: that turn
    diverges, and no later turn does (the later prompts carry the change forward; they add nothing to it)."""
    ctx, ro = model
    sampled = list(ro.sampled)
    sampled[turn] = split_one(ctx, ro.sampled[turn])
    fed = list(sampled)
    fed[turn] = reencoded(ctx, sampled[turn], ro.sampled[turn])
    assert diverged(ctx, record(ro, sampled, fed, "context")) == [(turn, "non_canonical")]


def test_a_truncated_turn_reencoded_at_its_end_is_one_divergence(model):
    """A turn cut off before its stop token whose last token was split: re-encoding changes its last ids, and the
    environment's delta follows them directly in the next prompt; the delta is still the delta."""
    ctx, ro = model
    body = ro.sampled[1][:-1]
    cut = next(
        n
        for n in range(len(body) - 1, 2, -1)
        if ctx.renderer.encode(ctx.decode(body[:n])) == body[:n] and Splitter(ctx.renderer.tokenizer)(body[n - 1])
    )
    truncated = body[:cut]
    sampled = [ro.sampled[0], split_one(ctx, truncated, last=True), ro.sampled[2]]
    fed = [ro.sampled[0], reencoded(ctx, sampled[1], truncated), ro.sampled[2]]
    closed = Rollout(ro.prompt, sampled, [ro.deltas[0], [ro.sampled[1][-1], *ro.deltas[1]]])  # the loop closes it
    assert diverged(ctx, record(closed, sampled, fed, "context")) == [(1, "non_canonical")]


@pytest.mark.parametrize("trained", ["context", "sampled"])
def test_a_later_rewrite_after_a_reencoded_turn_is_still_reported(model, trained):
    """Turn 0 re-encoded and, later, part of turn 1 dropped from the history: both are reported, each in its turn,
    whether the trainer trains on what the engine was given or on the sampled ids (then only the engine's prompts
    show either change)."""
    ctx, ro = model
    s0 = split_one(ctx, ro.sampled[0])
    sampled = [s0, ro.sampled[1], ro.sampled[2]]
    s1 = ro.sampled[1]
    dropped = [*s1[:1], *s1[5:]]  # four ids of the content gone
    assert ctx.decode(s1[1:5]).strip()
    fed = [reencoded(ctx, s0, ro.sampled[0]), dropped, ro.sampled[2]]
    found = diverged(ctx, record(ro, sampled, fed, trained))
    assert found == [(0, "non_canonical"), (1, "history_rewrite")]
