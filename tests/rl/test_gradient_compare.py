"""The streamed B/R gradient comparison, the chunked log-softmax and batched sampling (small models, no hub)."""

from __future__ import annotations

import pytest
import torch

from tito_audit.policy.gradient_compare import (
    add_to_parameters,
    compare,
    compare_with,
    hold_gradient,
    trainable,
)
from tito_audit.policy.gradients import gather_log_softmax, surrogate_pass, token_logps, view_gradient
from tito_audit.policy.model import VocabMap, build_small_model
from tito_audit.policy.view import View
from tito_audit.rl.sampling import GenerationSettings, generate


@pytest.fixture(scope="module")
def small():
    vmap = VocabMap.compact(range(60))
    return build_small_model(vmap.size, hidden=32, seed=1), vmap


def _views(shift: int = 0) -> list[View]:
    return [View(list(range(i, i + 14)), [0] * 5 + [1] * 9) for i in range(shift, shift + 4)]


def test_streamed_comparison_equals_the_comparison_of_full_gradients(small):
    model, vmap = small
    adv = [1.0, -0.5, 0.25, 2.0]
    b, r = _views(), _views(1)
    full = compare(view_gradient(model, vmap, b, adv).grads, view_gradient(model, vmap, r, adv).grads)
    params = trainable(model)
    held = hold_gradient(params, surrogate_pass(model, vmap, b, adv))
    streamed = compare_with(held, surrogate_pass(model, vmap, r, adv))
    assert streamed.cosine == pytest.approx(full.cosine, rel=1e-9)
    assert streamed.rel_error == pytest.approx(full.rel_error, rel=1e-9)
    assert 0 < streamed.cosine < 1 and not streamed.bitwise_equal
    # Every gradient was dropped as soon as it was compared: nothing is left in .grad or in the held copy.
    assert all(p.grad is None for p in params) and all(g is None for g in held.grads)


def test_held_gradient_compared_twice(small):
    model, vmap = small
    adv = [1.0] * 4
    params = trainable(model)
    held = hold_gradient(params, surrogate_pass(model, vmap, _views(), adv))
    again = compare_with(held, surrogate_pass(model, vmap, _views(), adv), release=False)
    assert again.bitwise_equal and again.rel_error == 0.0 and again.cosine == 1.0
    assert all(g is not None for g in held.grads)  # kept for the next comparison
    other = compare_with(held, surrogate_pass(model, vmap, _views(2), adv))
    assert other.rel_error > 0 and all(g is None for g in held.grads)


def test_a_pass_that_ran_two_backwards_after_before_last_is_refused(small):
    model, vmap = small
    params = trainable(model)
    held = hold_gradient(params, surrogate_pass(model, vmap, _views(), [1.0] * 4))

    def twice(before_last):
        before_last()
        for v in _views()[:2]:
            token_logps(model, vmap, v)[0].sum().backward()

    with pytest.raises(RuntimeError, match="more than one backward"):
        compare_with(held, twice)


def test_a_zero_first_gradient_compares_nothing(small):
    model, vmap = small
    params = trainable(model)
    held = hold_gradient(params, surrogate_pass(model, vmap, _views(), [0.0] * 4))
    c = compare_with(held, surrogate_pass(model, vmap, _views(1), [1.0] * 4))
    assert not c.compared and c.rel_error is None and c.cosine is None and c.to_dict()["bitwise_equal"] is None


def test_in_place_steps_move_back(small):
    model, vmap = small
    params = trainable(model)
    before = [p.detach().clone() for p in params]
    g = view_gradient(model, vmap, _views(), [1.0] * 4).grads
    add_to_parameters(params, g, -0.5)
    assert compare(before, [p.detach() for p in params]).diff_norm > 0
    add_to_parameters(params, g, 0.5)
    assert compare(before, [p.detach() for p in params]).rel_error < 1e-6


def test_chunked_log_softmax_matches_autograd():
    torch.manual_seed(0)
    x = torch.randn(7, 11, dtype=torch.float64, requires_grad=True)
    y = torch.tensor([0, 3, 10, 5, 5, 1, 2])
    ours = gather_log_softmax(x, y)
    ref = torch.log_softmax(x.float(), -1).gather(1, y[:, None])[:, 0]
    assert torch.allclose(ours, ref, atol=1e-6)
    w = torch.randn(7, dtype=torch.float32)
    (g_ours,) = torch.autograd.grad((ours * w).sum(), x)
    (g_ref,) = torch.autograd.grad((torch.log_softmax(x, -1).gather(1, y[:, None])[:, 0] * w.double()).sum(), x)
    assert torch.allclose(g_ours, g_ref, atol=1e-6)


def test_padded_batch_gives_the_log_probs_of_one_sequence_at_a_time(small):
    model, vmap = small
    prompts = [list(range(5, 40)), list(range(20, 26)), [3, 4]]
    outs = generate(model, vmap, prompts, [7], GenerationSettings(max_new_tokens=25), torch.Generator().manual_seed(0))
    assert len({len(p) for p in prompts}) == 3  # left padding of 0, 29 and 33 ids
    for prompt, (ids, lps) in zip(prompts, outs, strict=True):
        assert ids and (7 not in ids[:-1])  # sampling stops at the stop id
        alone, _ = token_logps(model, vmap, View([*prompt, *ids], [0] * len(prompt) + [1] * len(ids)), grad=False)
        assert torch.allclose(alone.double(), torch.tensor(lps, dtype=torch.float64), atol=1e-5)
    # Greedy completions with per-row limits.
    greedy = generate(model, vmap, prompts, [7], GenerationSettings(), None, greedy=True, max_new=[2, 4, 6])
    assert [len(ids) <= n for (ids, _), n in zip(greedy, [2, 4, 6], strict=True)] == [True] * 3
