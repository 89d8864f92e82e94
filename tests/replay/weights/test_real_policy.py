"""``replay --weights`` on a real trained policy (issue 38): SmolLM2-135M-Instruct, its own samples.

The logs are sampled here from the policy itself (``tito_audit.testing.policy_rollouts``: KV-cached decoding of
short conversations, the engine in float32 or in a bfloat16 copy, raw log-probs as vLLM logs them) and written by
a loop whose bug, or none, the test states; the expected figures come from that truth and from computations
written here (the top-p hand computation), never from the code under test.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.conftest import invoke, write_jsonl
from tito_audit import load
from tito_audit.policy.generation import GenerationSettings
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.testing.policy_rollouts import ASSISTANT, CONVERSATIONS, log_episode, sample_episodes

MAX_NEW = 20
GRADIENT_EPISODES = 2  # the gradient of 135M parameters, twice per episode: the costly part on a CPU


@pytest.fixture(scope="module")
def real(smollm2):
    """The folder, its renderer and stop ids, the policy in float32, and its episodes under two engines."""
    loaded = load(str(smollm2))
    renderer = Renderer(loaded.tokenizer, loaded.chat_template)
    stops = list(stop_token_ids(loaded.tokenizer, renderer))
    policy = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    settings = GenerationSettings(max_new_tokens=MAX_NEW)
    bf16 = copy.deepcopy(policy).to(torch.bfloat16)  # the engine's copy (slow on a CPU: two conversations)
    episodes = {
        "float32": sample_episodes(policy, renderer, stops, settings, seed=1),
        "bfloat16": sample_episodes(bf16, renderer, stops, settings, seed=2, conversations=CONVERSATIONS[:2]),
    }
    return {"folder": str(smollm2), "renderer": renderer, "stops": stops, "policy": policy, "episodes": episodes}


def replay(tmp_path, real, rows, *args):
    """``tito-audit replay LOG --model FOLDER [ARGS]`` in this process: (exit code, the JSON report's model)."""
    log = write_jsonl(tmp_path / "log.jsonl", rows)
    out = tmp_path / "report.json"
    res = invoke("replay", str(log), "-m", real["folder"], "-w", "1", "-q", "-f", "json", "-o", str(out), *args)
    assert out.is_file(), res.output
    return res.exit_code, json.loads(out.read_text())["models"][0]


def logged(real, engine, loop, **kw):
    return [log_episode(ep, loop, f"{engine}-{n}", **kw) for n, ep in enumerate(real["episodes"][engine])]


def checks(model):
    return {c["id"]: c for c in model["checks"]}


def test_correct_loop_is_exact_numeric_and_its_gradients_identical(tmp_path, real):
    rows = logged(real, "float32", "correct")
    code, m = replay(tmp_path, real, rows, "--weights", real["folder"], "--max-episodes", str(GRADIENT_EPISODES))
    c = checks(m)
    assert code == 0 and m["verdict"] in ("safe", "tito-required"), m["verdict_reasons"]
    assert c["replay_divergence"]["status"] == "pass" and c["replay_incomplete"]["status"] == "pass"
    a = m["replay"]["weights"]["attribution"]["classes"]
    assert a["numeric"]["share"] > 0.999 and a["tito"]["units"] == 0 and a["never_sampled"]["trained_tokens"] == 0
    assert a["numeric"]["mean_abs_dlogp"] < 1e-3  # a float32 engine: the same arithmetic but for batch shapes
    g = m["replay"]["weights"]["gradient"]
    assert g["compared"] == GRADIENT_EPISODES == g["identical"] and g["differ"] == 0
    assert c["replay_logprob_alignment"]["status"] == "pass"


def test_bf16_engine_gives_numeric_drift_only(tmp_path, real):
    code, m = replay(tmp_path, real, logged(real, "bfloat16", "correct"), "--weights", real["folder"], "--no-gradient")
    c = checks(m)
    assert code == 0 and c["replay_divergence"]["status"] == "pass"
    a = m["replay"]["weights"]["attribution"]["classes"]
    assert a["numeric"]["share"] > 0.999 and a["tito"]["units"] == 0 and a["never_sampled"]["trained_tokens"] == 0
    assert 0.01 < a["numeric"]["mean_abs_dlogp"] < 0.5  # bfloat16 against float32: drift, no token bug
    drift = c["replay_numeric_drift"]
    assert drift["status"] == "warn" and [f["class"] for f in drift["findings"]] == ["numeric"]
    assert c["replay_logprob_alignment"]["status"] == "pass"  # the logged alignment is the right one


def test_retokenizing_loop_is_unsafe_with_its_tito_share_and_a_gradient_cosine_below_one(tmp_path, real):
    rows = logged(real, "float32", "retokenize")
    code, m = replay(tmp_path, real, rows, "--weights", real["folder"], "--max-episodes", str(GRADIENT_EPISODES))
    assert code == 1 and m["verdict"] == "unsafe"
    a = m["replay"]["weights"]["attribution"]["classes"]
    assert (a["tito"]["share"] or 0) + (a["never_sampled"]["share"] or 0) > 0.5
    g = m["replay"]["weights"]["gradient"]
    assert g["differ"] > 0 and g["cosine_min"] < 1.0


@pytest.mark.parametrize(
    ("engine", "shift", "name"),
    [("float32", 1, "one position late"), ("bfloat16", -1, "one position early"), ("float32", 2, "two positions late")],
)
def test_shifted_log_probs_are_named_misaligned_not_numeric(tmp_path, real, engine, shift, name):
    rows = logged(real, engine, "logprobs_shifted", shift=shift)
    code, m = replay(tmp_path, real, rows, "--weights", real["folder"], "--no-gradient")
    c = checks(m)
    assert code == 1 and m["verdict"] == "unsafe" and "unsafe:replay_logprob_alignment" in m["verdict_reasons"]
    aligned = c["replay_logprob_alignment"]
    assert aligned["status"] == "fail" and aligned["findings"][0]["class"] == "logprob_alignment"
    assert name in aligned["findings"][0]["message"]
    h = m["replay"]["weights"]["alignment"]["hypotheses"][f"shift {shift:+d}"]
    assert h["mean_abs_dlogp"] * 10 <= h["logged_mean_abs_dlogp"]  # the evidence: far better realigned
    drift = c["replay_numeric_drift"]
    assert not any(f["class"] == "numeric" and "not a token bug" in f["message"] for f in drift["findings"])
    assert "not numeric drift" in drift["summary"]


def test_a_logger_shifted_in_one_episode_only_is_named_with_that_episode(tmp_path, real):
    """One episode of four logged one position late (one code path of the logger): the log-wide means fit neither
    alignment (the shifted episode's error dilutes into the others), so only the episode on its own shows it."""
    rows = logged(real, "float32", "correct")
    rows[2] = log_episode(real["episodes"]["float32"][2], "logprobs_shifted", "float32-2", shift=1)
    code, m = replay(tmp_path, real, rows, "--weights", real["folder"], "--no-gradient")
    aligned = checks(m)["replay_logprob_alignment"]
    assert code == 1 and m["verdict"] == "unsafe" and aligned["status"] == "fail"
    assert "one position late" in aligned["findings"][0]["message"]
    assert (
        aligned["findings"][0]["scenario"].startswith("1 of 4 episode(s)")
        and "line 3" in aligned["findings"][0]["scenario"]
    )
    whole = m["replay"]["weights"]["alignment"]["hypotheses"]["shift +1"]
    assert whole["mean_abs_dlogp"] * 10 > whole["logged_mean_abs_dlogp"]  # the log-wide rule alone would not see it


def test_environment_tokens_logged_as_sampled_are_unsafe_without_weights(tmp_path, real):
    rows = logged(real, "float32", "environment_as_sampled")
    code, m = replay(tmp_path, real, rows)
    div = checks(m)["replay_divergence"]
    assert code == 1 and m["verdict"] == "unsafe"
    assert div["data"]["by_class"] == {"environment": sum(len(r["turns"]) - 1 for r in rows)}
    spans = [ep.traj.sampled_spans() for ep in real["episodes"]["float32"]]
    assert sorted(f["index"] for f in div["findings"]) == sorted(s[k - 1][1] for s in spans for k in range(1, len(s)))


def test_kl_estimator_bias_under_top_p_equals_a_hand_computation_at_one_position(tmp_path, real):
    """One sampled position (a one-token turn under top-p 0.9), a reference of the policy's weights rounded to
    bfloat16: the replay's exact KL, E_q[k3] and bias at that position, against numpy-free torch sums here."""
    renderer, stops, policy = real["renderer"], real["stops"], real["policy"]
    settings = GenerationSettings(top_p=0.9, max_new_tokens=1)
    conversation = ({"role": "user", "content": "Name a colour."}, ASSISTANT)
    ep = sample_episodes(policy, renderer, stops, settings, seed=3, conversations=[conversation])[0]
    ref_folder = tmp_path / "ref"
    ref = copy.deepcopy(policy)
    with torch.no_grad():  # the weights rounded, not the rotary buffers (.to(bfloat16) would round those too)
        for w in ref.parameters():
            w.copy_(w.to(torch.bfloat16).to(torch.float32))
    ref.save_pretrained(ref_folder)
    record = log_episode(ep, "correct", "one")
    (a, b), ids = ep.traj.sampled_spans()[0], ep.traj.input_ids
    assert b - a == 1
    with torch.no_grad():
        lp = torch.log_softmax(policy(torch.tensor([ids[:a]])).logits[0, -1].double(), -1)
        lr = torch.log_softmax(ref(torch.tensor([ids[:a]])).logits[0, -1].double(), -1)
    p = lp.exp()
    kl = float((p * (lp - lr)).sum())
    order = torch.argsort(p, descending=True)  # top-p by hand: the most likely tokens until their mass reaches 0.9
    mass = torch.cumsum(p[order], 0)
    keep = order[: int((mass < 0.9).sum()) + 1]
    q = torch.zeros_like(p)
    q[keep] = p[keep] / p[keep].sum()
    log_r = (lr - lp).clamp(-20, 20)
    e_k3 = float((q * (log_r.exp() - 1 - log_r).clamp(-10, 10)).sum())
    code, m = replay(tmp_path, real, [record], "--weights", real["folder"], "--ref", str(ref_folder), "--no-gradient")
    est = m["replay"]["weights"]["estimators"]
    assert code == 0 and est["positions"] == 1
    # log r is ~1e-2 here (bf16 rounding), so float32 forward-shape noise (~1e-6 in a logit) moves k3 ~ (log r)^2 / 2
    # by ~1e-4 of itself: relative 1e-3 (a 1e-6 absolute bound would be 2 % of these ~6e-5 figures)
    assert est["kl"] == pytest.approx(kl, rel=1e-3)
    assert est["expected_k3"] == pytest.approx(e_k3, rel=1e-3)
    assert est["bias_k3"] == pytest.approx(e_k3 - kl, rel=1e-2)  # a difference of two close figures
    assert abs(e_k3 - kl) > 0.01 * kl  # top-p truncates: k3 is biased here (the check has something to say)
    assert checks(m)["replay_kl_estimators"]["status"] == "warn"  # top-p is not pure
