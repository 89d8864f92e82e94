"""The rl verdict cannot be a false green: zero advantages, affected scenarios outside the played batch, a template
without tool calls, non-canonical samples; exit codes 0/1/2/3; options checked before anything is loaded."""

from __future__ import annotations

import pytest
from conftest import snapshot
from typer.testing import CliRunner

from tito_audit.cli import app
from tito_audit.rl import RLConfig, run_rl
from tito_audit.rl import loop as rl_loop
from tito_audit.rl.verdict import decide

QUICK = dict(steps=1, groups=1, group_size=3, scenarios=("single_call/plain", "two_calls/plain", "reasoning/plain"))


def _rl(*args: str) -> object:
    return CliRunner().invoke(app, ["rl", *args])


def test_zero_advantages_still_compare_b_and_r(monkeypatch):
    # Every reward of a group equal (a batch that all succeeds or all fails): GRPO advantages are all 0, so the
    # update's gradients are 0 on both sides. The verdict's comparison uses A = 1 and still compares.
    monkeypatch.setattr(rl_loop, "group_advantages", lambda eps: [0.0] * len(eps))
    q3 = run_rl(RLConfig(model=str(snapshot("Qwen/Qwen3-0.6B")), **QUICK))
    q25 = run_rl(RLConfig(model=str(snapshot("Qwen/Qwen2.5-7B-Instruct")), **QUICK))
    g3, g25 = q3.steps[0]["gradient"], q25.steps[0]["gradient"]
    assert q3.steps[0]["advantages"] == [0.0, 0.0, 0.0]
    assert g3["norm_b"] > 0 and g3["rel_error"] > 0.05 and q3.summary["verdict"] == "corrupted"
    assert g25["norm_b"] > 0 and g25["bitwise_equal"] and q25.summary["verdict"] == "identical"


def test_affected_scenarios_outside_the_batch_are_never_identical():
    # Phi-3: batch 0 holds only scenarios R reproduces, but the exact token facts of every scenario show trained
    # tokens without partner (its whitespace scenarios): corrupted, exit 1.
    res = run_rl(RLConfig(model=str(snapshot("microsoft/Phi-3-mini-4k-instruct")), steps=1))
    assert res.steps[0]["alignment"]["sequences_affected"] == 0 and res.steps[0]["gradient"]["rel_error"] == 0.0
    assert res.setup["token_facts"]["mismatched_trained"] > 0
    assert res.summary["verdict"] == "corrupted" and res.summary["exit_code"] == 1
    assert any(r.startswith("token facts") for r in res.summary["reasons"])


def test_template_without_tool_calls_is_not_applicable_to_tool_turns():
    r = _rl(str(snapshot("google/gemma-2-2b-it")), "--steps", "1")
    assert r.exit_code == 3, r.output
    assert "not applicable to tool turns" in r.output and "R gradient identical" not in r.output
    assert "parse rate over every scenario n/a" in r.output


def test_exit_codes_and_what_the_verdict_holds_for():
    q3 = _rl(str(snapshot("Qwen/Qwen3-0.6B")), "--steps", "1")
    assert q3.exit_code == 1 and "R gradient corrupted" in q3.output
    assert "what to do: keep a token buffer" in q3.output and "check_batch" in q3.output
    assert "tito-audit fix" in q3.output
    q25 = _rl(str(snapshot("Qwen/Qwen2.5-7B-Instruct")), "--steps", "1")
    assert q25.exit_code == 0 and "R gradient identical to B" in q25.output
    assert "holds for: canonical samples only" in q25.output and "--noncanonical-rate 0.05" in q25.output


def test_noncanonical_samples_corrupt_the_identical_template():
    res = run_rl(RLConfig(model=str(snapshot("Qwen/Qwen2.5-7B-Instruct")), noncanonical_rate=0.05, **QUICK))
    assert res.setup["token_facts"]["sequences_affected"] > 0 and res.summary["verdict"] == "corrupted"
    assert "5% of sampled tokens split non-canonically" in res.summary["holds_for"]
    assert any("template patch cannot help" in line for line in res.summary["what_to_do"])


def test_a_batch_that_compared_nothing_is_undetermined():
    step = {"step": 0, "noise_floor": 0.0, "gradient": {"rel_error": None, "cosine": None}}
    clean = {k: 0 for k in ("mismatched_trained", "flip_sampled_dropped", "flip_template_trained", "naive_crashes")}
    out = decide([step], {"token_facts": clean, "template_parse_rate": 1.0}, {"model": "m"})
    assert out["verdict"] == "undetermined" and out["exit_code"] == 3
    out = decide([], {"token_facts": clean, "template_parse_rate": 1.0}, {"model": "m"})
    assert out["verdict"] == "undetermined"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "--steps must be >= 1"),
        (["--device", "gpu"], "--device must be auto, cpu, cuda or cuda:N"),
        (["--warmup", "1", "--generation-kwargs", "{oops"], "--generation-kwargs is not JSON"),
        (["--warmup", "1", "--generation-kwargs", '{"beam": 2}'], "unsupported key(s) beam"),
        (["--ref", "/x"], "--ref is the reference of the KL section"),
    ],
)
def test_options_are_checked_before_the_model_is_loaded(args, message):
    # The model does not exist: an option error, not "not found", proves nothing was loaded first.
    r = _rl("/nonexistent/model/folder", *args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_cuda_n_is_accepted_syntax():
    import torch

    r = _rl("/nonexistent/model/folder", "--device", "cuda:0")
    assert r.exit_code == 2
    if not torch.cuda.is_available():
        assert "torch sees no CUDA device" in r.output and "must be auto" not in r.output
