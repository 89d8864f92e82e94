"""Unit tests of the two views, alignment, KL estimators and the gradient comparison (fast, no hub)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tito_audit.errors import UsageError
from tito_audit.policy.gradient_compare import compare
from tito_audit.policy.gradients import view_gradient
from tito_audit.policy.model import VocabMap, build_small_model
from tito_audit.policy.view import View
from tito_audit.rendering import Renderer
from tito_audit.rl import diagnostics
from tito_audit.rl.episodes import Episode, apply_noncanonical, canonical_episodes, group_advantages
from tito_audit.rl.kl import estimators, exact_kl, kl_summary
from tito_audit.rl.sampling import GenerationSettings
from tito_audit.rollout import stop_token_ids
from tito_audit.scenarios import build_scenarios
from tito_audit.sources.load import load


@pytest.fixture(scope="module")
def qwen3():
    m = load("qwen3-0.6b")
    r = Renderer(m.tokenizer, m.chat_template)
    return m, r, stop_token_ids(m.tokenizer, r, m.generation_eos_ids)


def test_naive_view_drops_qwen3_empty_think_from_earlier_turns(qwen3):
    _m, r, stops = qwen3
    sc = [s for s in build_scenarios() if s.id == "two_calls/plain"]
    eps, _ = canonical_episodes(r, sc, stops)
    ep = eps[0]
    think = r.encode("<think>\n\n</think>\n\n")
    b_text = r.decode(ep.buffer.ids)
    n_think_b = b_text.count("<think>")
    assert n_think_b == 3  # every sampled turn emitted the empty block
    assert r.decode(ep.naive.ids).count("<think>") == 1  # the re-render keeps it on the last turn only
    a = diagnostics.alignment(ep.buffer, ep.naive)
    assert a["flip_sampled_dropped"] + a["b_trained_unmatched"] >= 2 * len(think)
    assert not a["identical"]


def test_identical_views_give_exact_control():
    v = View([1, 2, 3, 4, 5], [0, 0, 1, 1, 1])
    a = diagnostics.alignment(v, View(list(v.ids), list(v.mask)))
    assert a["identical"] and a["mismatched_trained"] == 0 and a["flip_template_trained"] == 0
    g = [torch.randn(1000), torch.randn(7, 3)]
    n = float(sum(float((x.double() ** 2).sum()) for x in g) ** 0.5)
    assert compare(g, [x.clone() for x in g]).to_dict() == {
        "cosine": 1.0,
        "rel_error": 0.0,
        "norm_b": pytest.approx(n),
        "norm_r": pytest.approx(n),
        "bitwise_equal": True,
    }
    c = compare(g, [-x for x in g])
    assert c.cosine == pytest.approx(-1.0) and c.rel_error == pytest.approx(2.0)


def test_mask_flip_split():
    b = View([10, 11, 12, 13, 14], [0, 1, 1, 0, 1])  # turns (1, 3) and (4, 5)
    r = View([10, 11, 12, 13, 14], [0, 0, 1, 1, 1], [(2, 3), (3, 5)])
    a = diagnostics.alignment(b, r)
    assert a["flip_sampled_dropped"] == 1 and a["flip_template_trained"] == 1 and not a["shape_mismatch"]


def test_kl_estimators_known_values():
    lp = torch.tensor([-1.0, -2.0, -0.5])
    ks = estimators(lp, lp.clone())
    assert all(float(v.abs().max()) == 0.0 for v in ks.values())
    ref = torch.tensor([-2.0, -1.0, -0.5])
    ks = estimators(lp, ref)
    log_r = ref.double() - lp.double()
    assert torch.allclose(ks["k1"], -log_r)
    assert torch.allclose(ks["k3"], log_r.exp() - 1 - log_r)
    assert float(ks["k3"].min()) >= 0.0
    huge = estimators(torch.tensor([-100.0]), torch.tensor([0.0]))
    assert float(huge["k3"][0]) == 10.0  # clamped, not 1e43
    s = kl_summary([torch.tensor([-2.0, -2.1]), torch.tensor([-1.9, -2.0])], [torch.full((2,), -0.1)] * 2)
    assert s["negative_kl"] and s["k1_mean"] == pytest.approx(-1.9) and s["k1_se"] > 0
    # One noisy negative token among positive ones is no significant negative KL.
    s = kl_summary([torch.tensor([-1.0, -1.2]), torch.tensor([-1.0, -0.9])], [torch.tensor([-1.0, -1.0])] * 2)
    assert s["k1_mean"] < 0 and not s["negative_kl"] and "warning" not in s


def test_exact_kl_matches_definition():
    a, b = torch.randn(5, 11), torch.randn(5, 11)
    p, q = a.double().softmax(-1), b.double().softmax(-1)
    assert torch.allclose(exact_kl(a, b), (p * (p / q).log()).sum(-1))
    assert float(exact_kl(a, a).abs().max()) < 1e-12


def test_group_advantages_zero_for_constant_group():
    eps = [Episode("a", View([], []), View([], []), [], reward=r, group=g) for r, g in [(1, 0), (1, 0), (0, 1), (2, 1)]]
    adv = group_advantages(eps)
    assert adv[:2] == [0.0, 0.0]
    assert adv[2] == pytest.approx(-1.0, abs=1e-5) and adv[3] == pytest.approx(1.0, abs=1e-5)


def test_noncanonical_split_keeps_text(qwen3):
    m, r, _ = qwen3
    ids = r.encode("The weather in Paris is sunny today")
    v = View(ids, [1] * len(ids))
    out, _lps, n = apply_noncanonical(m.tokenizer, v, [None] * len(ids), 1.0, random.Random(0))
    assert n > 0 and len(out.ids) == len(ids) + n
    assert r.decode(out.ids) == r.decode(ids)
    assert r.encode(r.decode(out.ids)) == ids  # the re-encoding is canonical again


def test_view_gradient_identical_views_bitwise_and_different_views_differ():
    vmap = VocabMap.compact(range(50))
    model = build_small_model(vmap.size, hidden=32, seed=1)
    views = [View(list(range(i, i + 12)), [0] * 4 + [1] * 8) for i in range(4)]
    adv = [1.0, -1.0, 0.5, -0.5]
    g1 = view_gradient(model, vmap, views, adv).grads
    g2 = view_gradient(model, vmap, [View(list(v.ids), list(v.mask)) for v in views], adv).grads
    assert compare(g1, g2).cosine == 1.0 and compare(g1, g2).rel_error == 0.0
    other = [View([*v.ids[:6], 49, *v.ids[6:]], [*v.mask[:6], 1, *v.mask[6:]]) for v in views]
    c = compare(g1, view_gradient(model, vmap, other, adv).grads)
    assert c.cosine is not None and c.cosine < 1.0 and c.rel_error is not None and c.rel_error > 0.0
    assert not math.isnan(c.cosine)


def test_compact_vocab_unknown_ids_share_unk_row():
    vmap = VocabMap.compact([5, 7, 9])
    assert vmap.to_model([5, 9, 123456]) == [0, 2, 3]
    assert vmap.unk == 3 and vmap.to_tok([0, 1]) == [5, 7]


def test_generation_settings():
    assert GenerationSettings.parse(None, 16).pure
    assert not GenerationSettings.parse('{"top_k": 50}', 16).pure
    with pytest.raises(UsageError):
        GenerationSettings.parse("{bad", 16)
    with pytest.raises(UsageError):
        GenerationSettings.parse('{"beam": 4}', 16)


def test_alignment_is_per_turn_on_repeated_identical_turns():
    # Three identical turns "7 8 9 <stop=2>"; R drops the sampled think tokens (5 6) of the first two turns.
    # One global match may pair B's first turn with R's last; per turn, each turn loses exactly its 2 tokens.
    u, think, body = [1, 3], [5, 6], [7, 8, 9, 2]
    b_ids, b_mask, r_ids, r_mask = [], [], [], []
    for k in range(3):
        b_ids += u
        b_mask += [0, 0]
        b_ids += think + body
        b_mask += [1] * 6
        r_ids += u
        r_mask += [0, 0]
        r_ids += (think if k == 2 else []) + body
        r_mask += [1] * (6 if k == 2 else 4)
    b, r = View(b_ids, b_mask), View(r_ids, r_mask)
    a = diagnostics.alignment(b, r)
    assert [t["mismatched_trained"] for t in a["turns"]] == [2, 2, 0]
    assert a["mismatched_trained"] == 4 and a["turns_affected"] == 2
    # Every aligned pair stays in its own turn and pairs equal ids.
    for (pb, pr), k in zip(a["pairs"], a["pair_turns"], strict=True):
        assert b_ids[pb] == r_ids[pr] and r.turns[k][0] <= pr < r.turns[k][1]


def test_per_turn_count_on_qwen3_followup_differs_from_global_match(qwen3):
    _m, r, stops = qwen3
    sc = [s for s in build_scenarios() if s.id == "followup_user/plain"]
    ep = canonical_episodes(r, sc, stops)[0][0]
    per_turn = diagnostics.alignment(ep.buffer, ep.naive)
    whole = lambda v: View(v.ids, v.mask, [(0, len(v.ids))])  # noqa: E731
    global_match = diagnostics.alignment(whole(ep.buffer), whole(ep.naive))
    think = len(r.encode("<think>\n\n</think>\n\n"))
    # Every earlier turn loses exactly its empty think block; the last keeps it.
    assert [t["mismatched_trained"] for t in per_turn["turns"]] == [think] * 3 + [0]
    assert global_match["mismatched_trained"] > per_turn["mismatched_trained"]
