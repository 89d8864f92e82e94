"""Replay finds exactly the divergences a broken loop injects, and none in a correct loop, on every shared model.

The logs are the audit's scenarios played through ``tito_audit.Trajectory`` with a sampler that splits a token
of a turn at a known rate (``tito_audit.testing.synthetic``); each broken loop records where it changed what
is trained, by a plain common-prefix scan, and replay must report exactly those (turn, position, class).
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tests.conftest import SHARED_MODELS
from tito_audit.replay import TokenizerMismatch, replay_log
from tito_audit.replay.analyze import ReplayContext, analyze
from tito_audit.replay.schema import episode_from_native
from tito_audit.testing.synthetic import LOOPS, log_episode, played_episodes, replay_logged, with_engine_prompts

RATE = 0.3
_PLAYED: dict[str, tuple] = {}
# Loops that change nothing on some templates (the truth is then empty, and replay must report nothing).
MAY_INJECT_NOTHING = {"prefix_fallback": "the template never refuses an append"}


def played(loaded, spec):
    if spec not in _PLAYED:
        model = loaded(spec)
        _PLAYED[spec] = (ReplayContext.from_model(model), played_episodes(model, RATE, seed=7))
    return _PLAYED[spec]


@pytest.mark.parametrize("spec", SHARED_MODELS)
@pytest.mark.parametrize("loop", [*LOOPS, "prefix_fallback"])
def test_replay_finds_exactly_the_injected_divergences(loaded, spec, loop):
    ctx, plays = played(loaded, spec)
    assert plays, f"{spec}: no scenario played"
    injected = 0
    for n, p in enumerate(plays):
        logged = log_episode(p, loop, p.scenario.id)
        got, want, res = replay_logged(logged, n + 1, ctx)
        assert got == want, f"{spec} {loop} {p.scenario.id}: {[d.message for d in res.divergences]}"
        assert res.reference == "buffer" and res.error is None
        injected += len(want)
        if loop == "correct":
            assert (res.trained_not_sampled, res.sampled_not_trained, res.mask_flips) == (0, 0, 0)
        if loop == "stop_seam":  # each masked stop token is one sampled token not trained, one mask flip
            assert res.sampled_not_trained == res.mask_flips == len(want)
            assert res.trained_not_sampled == 0
            assert res.logprob_tokens == len(want)  # the engine's log-probs of exactly those tokens
    if loop == "correct":
        assert injected == 0
    elif loop not in MAY_INJECT_NOTHING:  # a broken loop that injects nothing would prove nothing
        assert injected > 0, f"{spec}: {loop} injected nothing"


@pytest.mark.parametrize("spec", SHARED_MODELS)
def test_measured_noncanonical_rate_is_the_injected_one(loaded, spec):
    ctx, plays = played(loaded, spec)
    turns = sum(len(p.turns) for p in plays)
    eligible = sum(sum(p.eligible) for p in plays)
    split = sum(s is not None for p in plays for s in p.splits)
    measured = 0
    for n, p in enumerate(plays):
        res = analyze(episode_from_native(log_episode(p, "correct", p.scenario.id).record, n + 1), ctx)
        measured += res.noncanonical_turns
    assert measured == split  # every split found, no canonical turn flagged
    # and the sampler's rate is what was asked for, within binomial sampling error
    sigma = math.sqrt(RATE * (1 - RATE) / eligible)
    assert abs(split / eligible - RATE) <= 3 * sigma, (split, eligible, turns)


@pytest.mark.parametrize("spec", SHARED_MODELS)
def test_engine_prompts_find_the_same_divergences_without_a_render(loaded, spec):
    """With the engine's prompt_ids in the log (what a correct loop sent) the engine's context is the reference:
    every broken trainer is found at the same (turn, position, class), with no render (what-if and drift off)."""
    ctx, plays = played(loaded, spec)
    tito_only = dataclasses.replace(ctx, whatif=False, drift=False, noncanonical=False)
    for loop in [*LOOPS, "prefix_fallback"]:
        for n, p in enumerate(plays):
            logged = log_episode(p, loop, p.scenario.id)
            logged.record = with_engine_prompts(logged.record, p)
            got, want, res = replay_logged(logged, n + 1, tito_only)
            assert got == want, f"{spec} {loop} {p.scenario.id}: {[d.message for d in res.divergences]}"
            assert res.reference == "engine" and res.whatif is None and res.drift is None


@pytest.mark.parametrize("n", range(len(SHARED_MODELS)))
def test_a_log_is_refused_exactly_by_the_tokenizers_it_was_not_written_with(loaded, n, tmp_path):
    """The fit comes from the tokenizer and the template: every model's correct log fits it; replayed with the
    next model's, it is refused (exit 2 in the CLI) unless that tokenizer reads every id of the log as the same
    token (Qwen2.5's log under Qwen3's tokenizer, which only adds tokens)."""
    spec, other = SHARED_MODELS[n], SHARED_MODELS[(n + 1) % len(SHARED_MODELS)]
    ctx, plays = played(loaded, spec)
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(log_episode(p, "correct", "").record) + "\n" for p in plays))
    quick = dataclasses.replace(ctx, whatif=False, drift=False, noncanonical=False)
    assert replay_log(path, quick).episodes == len(plays)  # its own tokenizer: never refused
    theirs, _ = played(loaded, other)
    theirs = dataclasses.replace(theirs, whatif=False, drift=False, noncanonical=False)
    mine, their_tok = loaded(spec).tokenizer, loaded(other).tokenizer
    ids = sorted({i for p in plays for i in p.traj.input_ids})
    same_tokens = ids[-1] < len(their_tok) and mine.convert_ids_to_tokens(ids) == their_tok.convert_ids_to_tokens(ids)
    if same_tokens:
        replay_log(path, theirs)
    else:
        with pytest.raises(TokenizerMismatch):
            replay_log(path, theirs)
