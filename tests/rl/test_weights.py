"""The --weights path on CPU with small real-architecture models written by ``save_pretrained``."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, Gemma2Config, Qwen3Config

from tests.conftest import snapshot, tiny_qwen3_config
from tito_audit.errors import UsageError
from tito_audit.policy.gradients import token_logps
from tito_audit.policy.model import VocabMap, load_weights
from tito_audit.policy.view import View
from tito_audit.rl import RLConfig, run_rl
from tito_audit.rl.sampling import GenerationSettings, sample_completion

QUICK = dict(steps=1, groups=1, group_size=3, device="cpu", scenarios=("single_call/plain", "two_calls/plain"))


def _save(config, folder) -> str:
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def qwen3_weights(tmp_path_factory):
    cfg = tiny_qwen3_config()  # Qwen3's architecture at a small width, the full 151,936-row vocabulary
    return _save(cfg, tmp_path_factory.mktemp("qwen3w"))


def test_weights_template_rollouts_qwen3_differs_qwen25_and_control_identical(qwen3_weights):
    q3 = run_rl(RLConfig(model=str(snapshot("Qwen/Qwen3-0.6B")), weights=qwen3_weights, rollouts="template", **QUICK))
    q25 = run_rl(
        RLConfig(model=str(snapshot("Qwen/Qwen2.5-7B-Instruct")), weights=qwen3_weights, rollouts="template", **QUICK)
    )
    ctl = run_rl(
        RLConfig(
            model=str(snapshot("Qwen/Qwen3-0.6B")), weights=qwen3_weights, rollouts="template", control=True, **QUICK
        )
    )
    assert q3.setup["vocab"] == "full" and q3.setup["model_vocab"] == 151936
    assert q3.summary["corrupted"] and q3.summary["rel_error_max"] > 100 * q3.summary["identical_tolerance"]
    assert not q25.summary["corrupted"] and not ctl.summary["corrupted"]
    assert q3.steps[0]["probability_diagnostics"].startswith("not computed")


def test_sampling_never_emits_padding_rows(qwen3_weights):
    model, _ = load_weights(qwen3_weights, torch.device("cpu"), 151669)
    vmap = VocabMap.full(151936, valid=1000)  # pretend only the first 1000 rows are tokens
    settings = GenerationSettings(max_new_tokens=200)
    ids, lps = sample_completion(model, vmap, [1, 2, 3], [], settings, torch.Generator().manual_seed(0))
    # Near-uniform random weights: unmasked, 99 % of the samples would be ids >= 1000.
    assert len(ids) == 200 and max(ids) < 1000 and all(lp <= 0 for lp in lps)


def test_weights_smaller_than_tokenizer_are_refused(tmp_path):
    small = _save(
        Qwen3Config(
            vocab_size=1000,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=8,
        ),
        tmp_path / "small",
    )
    with pytest.raises(UsageError, match="do not belong to this tokenizer"):
        load_weights(small, torch.device("cpu"), 151669)


def test_logits_come_from_the_models_own_head_with_soft_capping(tmp_path):
    cfg = Gemma2Config(
        vocab_size=512,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=2.0,
    )
    model, vmap = load_weights(_save(cfg, tmp_path / "g2"), torch.device("cpu"), 512)
    with torch.no_grad():
        for p in model.lm_head.parameters() if hasattr(model, "lm_head") else []:
            p.mul_(50.0)  # large logits, so that capping matters
    view = View(list(range(1, 21)), [0] * 5 + [1] * 15)
    logp, _ = token_logps(model, vmap, view, grad=False)
    ids = torch.tensor([view.ids])
    with torch.no_grad():
        full = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        hidden = model.model(input_ids=ids).last_hidden_state[0]
        raw = torch.log_softmax((hidden @ model.get_output_embeddings().weight.t()).float(), -1)
    y = torch.tensor(view.ids[5:])
    assert torch.allclose(logp, full[4:19].gather(1, y[:, None])[:, 0], atol=1e-5)
    assert not torch.allclose(logp, raw[4:19].gather(1, y[:, None])[:, 0], atol=1e-2)  # h @ W^T loses the cap
    assert isinstance(vmap, VocabMap) and vmap.is_full


def test_bfloat16_policy_keeps_weights_and_gradients_in_bf16(qwen3_weights):
    common = dict(model=str(snapshot("Qwen/Qwen3-0.6B")), weights=qwen3_weights, rollouts="template", dtype="bfloat16")
    q3 = run_rl(RLConfig(**common, **QUICK))
    ctl = run_rl(RLConfig(**common, control=True, **QUICK))
    assert q3.setup["dtype"] == "bfloat16" and q3.setup["weights_bytes"] == 2 * q3.setup["parameters"]
    assert q3.summary["verdict"] == "corrupted" and q3.steps[0]["gradient"]["rel_error"] > 0.01
    # the control (R := B) is its own verdict, never "identical" (the template's facts are reported beside it)
    assert ctl.summary["verdict"] == "control" and ctl.steps[0]["gradient"]["bitwise_equal"]
