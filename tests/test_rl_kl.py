"""Negative KL is a property of non-pure sampling: same prompts, same seeds, top_k versus pure sampling."""

from __future__ import annotations

import copy

import torch

from tito_audit.rendering import Renderer
from tito_audit.rl.episodes import canonical_episodes
from tito_audit.rl.kl import kl_summary
from tito_audit.rl.model import VocabMap, build_small_model
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
