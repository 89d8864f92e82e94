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
from tito_audit.testing.policy_rollouts import CONVERSATIONS, log_episode, sample_episodes

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
