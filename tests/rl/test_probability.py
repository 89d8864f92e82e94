"""The probability figures against hand-computed cases: the per-token logit gradient norm and its de-duplicated,
sign-split summary (seed 004), critical tokens with a model whose greedy completions are known (seed 003), the
certainty over the full vocabulary, and Lopti / AR's in-place studies."""

from __future__ import annotations

import copy
import math
import random
from types import SimpleNamespace

import pytest
import torch

from tito_audit.policy.gradient_compare import compare, trainable
from tito_audit.policy.model import VocabMap, build_small_model
from tito_audit.policy.view import View
from tito_audit.rl.critical_tokens import VerifiableTurn, certainty, certainty_table, critical_tokens
from tito_audit.rl.kl import exact_kl
from tito_audit.rl.low_probability import TokenRecord, low_probability_figure, token_records
from tito_audit.rl.positions import PositionStats, position_stats
from tito_audit.rl.update_studies import update_studies


def test_logit_gradient_norm_hand_case():
    # pi = (1/6, 2/6, 3/6), y = 0: ||e_y - pi||^2 = (5/6)^2 + (2/6)^2 + (3/6)^2 = 38/36.
    s = PositionStats(
        [1],
        torch.tensor([math.log(1 / 6)], dtype=torch.float64),
        *[torch.zeros(1)] * 3,
        torch.tensor([14 / 36], dtype=torch.float64),
        {},
    )
    norm = float(s.logit_gradient_norm[0])
    assert norm == pytest.approx(math.sqrt(38 / 36), rel=1e-12)
    # Yang et al.'s bounds for N = 3: (1 - p) sqrt(N / (N - 1)) <= norm <= sqrt(2) (1 - p).
    assert (5 / 6) * math.sqrt(1.5) <= norm <= math.sqrt(2) * 5 / 6


def test_position_stats_against_autograd_and_the_exact_kl():
    vmap = VocabMap.full(40)  # no shared row the sampler would skip: pure sampling draws from pi itself
    policy = build_small_model(vmap.size, hidden=32, seed=2)
    ref = copy.deepcopy(policy)
    with torch.no_grad():
        ref.model.norm.weight.mul_(1.5)
    view = View(list(range(3, 23)), [0] * 8 + [1] * 12)
    s = position_stats(policy, ref, vmap, view)
    ids = torch.tensor([vmap.to_model(view.ids)])
    logits = policy(input_ids=ids).logits[0, 7:19].double().detach().requires_grad_(True)
    y = torch.tensor(vmap.to_model(view.ids[8:20]))
    norms = []
    for i in range(12):
        (g,) = torch.autograd.grad(torch.log_softmax(logits[i], -1)[y[i]], logits)
        norms.append(float(g.norm()))
    assert torch.allclose(s.logit_gradient_norm, torch.tensor(norms, dtype=torch.float64), atol=1e-5)
    with torch.no_grad():
        want = exact_kl(logits.detach(), ref(input_ids=ids).logits[0, 7:19])
    assert torch.allclose(s.kl_exact, want, atol=1e-6) and float(s.kl_exact.min()) > 0
    # Pure sampling: E_pi[k1] and E_pi[k3] are the KL itself, E[k2] is not.
    e = s.expectations
    assert torch.allclose(e["e_k1"], e["kl"], atol=1e-9) and torch.allclose(e["e_k3"], e["kl"], atol=1e-9)
    assert float((e["e_k2"] - e["kl"]).abs().max()) > 1e-6 and float(e["truncated_mass"].max()) == 0.0


def test_low_probability_figure_hand_case():
    rec = TokenRecord
    records = [
        # Six copies of one token at one shared prefix, three with A > 0 and three with A < 0: their summed
        # parameter gradients cancel; per token each is pushed with ||e_y - pi|| = 1.0, and counts once per sign.
        *[rec(b"K1", 0.2, 1.0, +0.577)] * 3,
        *[rec(b"K1", 0.2, 1.0, -0.577)] * 3,
        rec(b"K2", 0.9, 0.1, +0.577),
        rec(b"K3", 0.95, 0.05, -0.577),
        rec(b"K4", 0.3, 0.8, +1.0),
        rec(b"K6", 0.6, 0.3, +1.0),
        rec(b"K5", 0.7, 0.4, 0.0),
    ]
    fig = low_probability_figure(records, eta=0.5)
    assert fig["tokens"] == 11 and fig["zero_advantage_tokens"] == 1 and fig["low_fraction"] == pytest.approx(7 / 11)
    pos, neg = fig["positive"], fig["negative"]
    assert (pos["tokens"], pos["unique_positions"], pos["low_positions"], pos["high_positions"]) == (6, 4, 2, 2)
    assert pos["mean_grad_norm_low"] == pytest.approx(0.9) and pos["mean_grad_norm_high"] == pytest.approx(0.2)
    assert pos["low_over_high"] == pytest.approx(4.5)
    assert (neg["unique_positions"], neg["mean_grad_norm_low"], neg["mean_grad_norm_high"]) == (2, 1.0, 0.05)
    # Quartiles are ranks of p, labelled with the p range each holds.
    assert [(q["p_min"], q["p_max"], q["mean_grad_norm"]) for q in pos["quartiles"]] == [
        (0.2, 0.2, 1.0),
        (0.3, 0.3, 0.8),
        (0.6, 0.6, 0.3),
        (0.9, 0.9, 0.1),
    ]


def test_token_records_share_keys_for_the_same_prefix_and_token():
    a = View([1, 2, 3, 4], [0, 0, 1, 1])
    b = View([1, 2, 3, 5], [0, 0, 1, 1])
    stats = [
        PositionStats(
            [2, 3],
            torch.log(torch.tensor([0.5, 0.25], dtype=torch.float64)),
            *[torch.zeros(2)] * 3,
            torch.full((2,), 0.3, dtype=torch.float64),
            {},
        )
    ] * 2
    recs = token_records([a, b], stats, [1.0, -1.0])
    assert recs[0].key == recs[2].key and recs[1].key != recs[3].key  # same (prefix, 3); then 4 vs 5


class _Bigram(torch.nn.Module):
    """Logits depend on the last token only: greedy completions are known by hand."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(table)

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None, logits_to_keep=0):
        logits = self.table[input_ids]
        return SimpleNamespace(logits=logits[:, -1:] if logits_to_keep == 1 else logits, cache=None)


def _table() -> torch.Tensor:
    t = torch.zeros(10, 10)
    for row, best, second in ((0, 1, 4), (1, 2, 6), (2, 3, 5), (3, 9, 6), (4, 5, 2), (5, 9, 0), (6, 9, 0)):
        t[row, best], t[row, second] = 5.0, 4.0
    t[7:9, 9] = 5.0
    return t


def test_critical_tokens_hand_case():
    # Stop id 9; a turn is right (reward 1) when it contains token 3. Greedy: 1->2->3->9, 4->5->9, 6->9.
    policy, vmap = _Bigram(_table()), VocabMap.full(10)
    buffers = [View([0, 1, 2, 3, 9], [0, 1, 1, 1, 1]), View([0, 4, 2, 3, 9], [0, 1, 1, 1, 1])]

    def score(ids: list[int]) -> float:
        return 1.0 if 3 in ids else 0.0

    turns = [VerifiableTurn(n, 1, 5, score(b.ids[1:5]), score) for n, b in enumerate(buffers)]
    entropy = {
        (n, t): h for n in (0, 1) for t, h in zip(range(1, 5), (0.0, math.log(2), math.log(4), 0.0), strict=True)
    }
    out = critical_tokens(
        policy,
        vmap,
        buffers,
        turns,
        entropy,
        [9],
        10,
        100,
        random.Random(0),
        lambda ids: [str(i) for i in ids],
        vocab_size=10,
        beta=2.0,
    )
    rows = {(r[0], r[1]): r[2] for r in out["tested"]}
    # Swapping 1, 2 or 3 loses the 3; swapping the stop for 6 keeps it. In the second turn, keeping the sampled 4
    # and completing greedily gives 4 5 9 (reward 0): the null swap flips the sampled outcome there, so comparing
    # the swap (1 2 3 9, reward 1) with the sampled outcome would have missed that this token decides the outcome.
    assert rows == {
        (0, 1): True,
        (0, 2): True,
        (0, 3): True,
        (0, 4): False,
        (1, 1): True,
        (1, 2): True,
        (1, 3): True,
        (1, 4): False,
    }
    assert out["tested_positions"] == 8 and out["critical"] == 6 and out["null_flips"] == 1
    # Certainty over the full vocabulary of 10: J = 1 - H / log 10; dJ against the sequence's other positions.
    j = [1.0, 1 - math.log(2) / math.log(10), 1 - math.log(4) / math.log(10), 1.0]
    assert out["J_mean_critical"] == pytest.approx(sum(j[:3]) / 3)
    assert out["J_mean_other"] == pytest.approx(1.0)
    assert out["dJ_mean_other"] == pytest.approx(1.0 - sum(j[:3]) / 3)
    assert out["kl_weight_mean_critical"] == pytest.approx(sum(x**2 for x in j[:3]) / 3)
    assert "this tool's operationalisation" in out["definition"]


def test_certainty_uses_the_full_vocabulary():
    assert certainty(math.log(2), 151669) == pytest.approx(1 - math.log(2) / math.log(151669))
    table = certainty_table({(0, 1): 0.0, (0, 2): math.log(151669)}, 151669)
    assert table[(0, 1)] == {"J": 1.0, "dJ": 1.0} and table[(0, 2)]["J"] == pytest.approx(0.0)


def test_update_studies_move_the_policy_back_and_split_by_advantage_sign():
    vmap = VocabMap.compact(range(40))
    policy = build_small_model(vmap.size, hidden=32, seed=4)
    views = [View(list(range(10 * i, 10 * i + 10)), [0] * 3 + [1] * 7) for i in range(4)]  # no token shared
    adv = [1.0, -1.0, 1.0, -1.0]
    before = [p.detach().clone() for p in trainable(policy)]
    p_y = [position_stats(policy, policy, vmap, v).p for v in views]
    eta = float(torch.cat(p_y).median())  # half the tokens on each side of eta
    out = update_studies(policy, vmap, views, adv, p_y, eta=eta, alpha=0.3, step_norm=0.05)
    assert compare(before, [p.detach() for p in trainable(policy)]).rel_error < 1e-6
    assert all(p.grad is None for p in trainable(policy))
    joint, lopti = out["lopti"]["mean_dlogp_joint"], out["lopti"]["mean_dlogp_lopti"]
    # The step raises log p where A > 0 and lowers it where A < 0, in both probability groups.
    assert joint["high_positive"] > 0 and joint["low_positive"] > 0
    assert joint["high_negative"] < 0 and joint["low_negative"] < 0
    assert all(v is not None for v in lopti.values())
    assert out["lopti"]["step_norm_joint"] == 0.05 and "no PPO ratio" in out["lopti"]["update"]
    assert 0 < out["advantage_reweighted"]["cosine_to_plain"] <= 1.0
    assert out["tokens"]["high_positive"] + out["tokens"]["low_positive"] == 14
