"""Negative KL is a property of non-pure sampling: same prompts, same seeds, top_k versus pure sampling."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tito_audit.policy.model import VocabMap, build_small_model
from tito_audit.rendering import Renderer
from tito_audit.rl.episodes import canonical_episodes
from tito_audit.rl.kl import kl_summary
from tito_audit.rl.sampling import GenerationSettings, sample_completion
from tito_audit.rollout import stop_token_ids
from tito_audit.scenarios import build_scenarios


def _k1_run(policy, ref, vmap, prompts, stops, settings):
    gen = torch.Generator().manual_seed(0)
    logp, logp_ref = [], []
    for prompt in prompts:
        ids, lps = sample_completion(policy, vmap, prompt, stops, settings, gen)
        full = torch.tensor([vmap.to_model([*prompt, *ids])])
        with torch.no_grad():
            lr = torch.log_softmax(ref(input_ids=full).logits[0].double(), -1)
        y = full[0, len(prompt) :]
        logp.append(torch.tensor(lps, dtype=torch.float64))
        logp_ref.append(lr[len(prompt) - 1 : -1].gather(1, y[:, None])[:, 0])
    return kl_summary(logp, logp_ref, pure=settings.pure, settings="top_k")


def test_top_k_gives_significant_negative_k1_pure_sampling_does_not(loaded):
    m = loaded("Qwen/Qwen3-0.6B")
    r = Renderer(m.tokenizer, m.chat_template)
    stops = stop_token_ids(m.tokenizer, r, m.generation_eos_ids)
    eps, _ = canonical_episodes(r, [s for s in build_scenarios() if s.id.endswith("/plain")], stops)
    prompts = [e.buffer.ids[: e.buffer.turns[0][0]] for e in eps[:6]]
    vmap = VocabMap.compact({t for e in eps for t in e.buffer.ids} | set(stops))
    ref = build_small_model(vmap.size, hidden=32, seed=3)
    with torch.no_grad():
        ref.model.norm.weight.mul_(10.0)  # a peaked reference distribution
    policy = copy.deepcopy(ref)
    with torch.no_grad():
        policy.model.norm.weight.mul_(0.5)  # the policy after an update: flatter than the reference
    pure = _k1_run(policy, ref, vmap, prompts, stops, GenerationSettings(max_new_tokens=40))
    top_k = _k1_run(policy, ref, vmap, prompts, stops, GenerationSettings(top_k=2, max_new_tokens=40))
    assert pure["tokens"] > 100 and top_k["tokens"] > 100
    # Pure sampling: k1 estimates KL(pi || ref) >= 0, no warning.
    assert not pure["negative_kl"] and "warning" not in pure
    # top_k keeps the tokens whose probability the flatter policy lowered: k1 < 0 beyond two standard errors,
    # and the warning names the non-pure sampling.
    assert top_k["negative_kl"] and top_k["k1_mean"] + 2 * top_k["k1_se"] < 0
    assert "non-pure sampling" in top_k["warning"]


def _expect(pi, ref, settings, **kw):
    from tito_audit.policy.kl_bias import estimator_expectations

    out = estimator_expectations(
        torch.tensor([pi], dtype=torch.float64).log(), torch.tensor([ref], dtype=torch.float64).log(), settings, **kw
    )
    return {k: float(v[0]) for k, v in out.items()}


def test_estimator_bias_under_top_k_is_the_analytic_value():

    # pi = (0.5, 0.3, 0.2), pi_ref = (0.4, 0.4, 0.2); top_k = 2 samples q = (0.625, 0.375, 0).
    e = _expect([0.5, 0.3, 0.2], [0.4, 0.4, 0.2], GenerationSettings(top_k=2))
    kl = 0.5 * math.log(0.5 / 0.4) + 0.3 * math.log(0.3 / 0.4)
    log_r = [math.log(0.4 / 0.5), math.log(0.4 / 0.3)]
    q = [0.625, 0.375]
    assert e["kl"] == pytest.approx(kl, abs=1e-12)
    assert e["e_k1"] == pytest.approx(sum(a * -b for a, b in zip(q, log_r, strict=True)), abs=1e-12)
    assert e["e_k2"] == pytest.approx(sum(a * b * b / 2 for a, b in zip(q, log_r, strict=True)), abs=1e-12)
    assert e["e_k3"] == pytest.approx(sum(a * (math.exp(b) - 1 - b) for a, b in zip(q, log_r, strict=True)), abs=1e-12)
    assert e["truncated_mass"] == pytest.approx(0.2, abs=1e-12)
    assert e["e_k3"] - e["kl"] == pytest.approx(0.006316787, abs=1e-8)  # k3 biased upward by 25 %


def test_pure_sampling_leaves_k1_and_k3_unbiased_and_the_other_processors_bias_them():
    pi, ref = [0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]
    pure = _expect(pi, ref, GenerationSettings())
    assert pure["e_k1"] == pytest.approx(pure["kl"], abs=1e-12) and pure["e_k3"] == pytest.approx(pure["kl"], abs=1e-12)
    assert pure["truncated_mass"] == 0.0 and abs(pure["e_k2"] - pure["kl"]) > 1e-3
    # top_p = 0.7 keeps the two tokens whose mass before them is below 0.7: q = (0.5, 0.3) / 0.8.
    top_p = _expect(pi, ref, GenerationSettings(top_p=0.7))
    assert top_p["truncated_mass"] == pytest.approx(0.2)
    # temperature 2: q proportional to sqrt(pi); nothing truncated, k1 still biased.
    hot = _expect(pi, ref, GenerationSettings(temperature=2.0))
    q = [p**0.5 / sum(x**0.5 for x in pi) for p in pi]

    assert hot["e_k1"] == pytest.approx(sum(a * math.log(p / r) for a, p, r in zip(q, pi, ref, strict=True)), abs=1e-12)
    # A stop id suppressed (min_new_tokens not reached yet): its mass is truncated.
    held = _expect(pi, ref, GenerationSettings(min_new_tokens=3), suppress_stop=torch.tensor([True]), stop_ids=[0])
    assert held["truncated_mass"] == pytest.approx(0.5)


def test_student_t_quantiles_match_the_tables():
    from tito_audit.rl.stats import student_t_quantile

    for df, want in ((1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423)):
        assert student_t_quantile(0.975, df) == pytest.approx(want, abs=1e-4)
    assert student_t_quantile(0.025, 4) == pytest.approx(-2.7764, abs=1e-4)
    assert student_t_quantile(0.9, 5) == pytest.approx(1.4759, abs=1e-4)


def test_two_sequences_need_t_with_one_degree_of_freedom():
    # k1 = -0.3 and -0.2 for two sequences: mean -0.25, SE 0.05. z = 2 would call it significant
    # (-0.25 + 2 * 0.05 < 0), t(1) = 12.7 does not (-0.25 + 12.7 * 0.05 > 0).
    s = kl_summary([torch.tensor([-0.3]), torch.tensor([-0.2])], [torch.tensor([0.0]), torch.tensor([0.0])])
    assert s["k1_mean"] == pytest.approx(-0.25) and s["k1_se"] == pytest.approx(0.05)
    assert s["degrees_of_freedom"] == 1 and s["k1_mean"] + 2 * s["k1_se"] < 0 and not s["negative_kl"]
    assert s["t_quantile"] == pytest.approx(12.706, abs=1e-3)
    one = kl_summary([torch.tensor([-1.0, -1.1, -0.9])], [torch.zeros(3)])
    assert not one["negative_kl"] and one["significance"].startswith("none")
