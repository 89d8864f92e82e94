"""End-to-end tests of the RL loop and the ``rl`` command on the hub models (CPU, compact vocabulary)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tests.conftest import HUB
from tito_audit.cli import rl as rl_cli
from tito_audit.report.rl_artifacts import RL_PLOTS
from tito_audit.rl import RLConfig, run_rl


def _snapshot(repo: str) -> str:
    """The hub-cache snapshot folder (a local source: independent of env read at import time)."""
    found = sorted((HUB / f"models--{repo.replace('/', '--')}" / "snapshots").glob("*/"))
    return str(found[0]) if found else repo


QWEN3, QWEN25 = _snapshot("Qwen/Qwen3-0.6B"), _snapshot("Qwen/Qwen2.5-7B-Instruct")
needs_hub = pytest.mark.skipif(
    not Path(QWEN3).is_dir() or not Path(QWEN25).is_dir(), reason="shared hub cache not available"
)


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    rl_cli.register(app)
    return app


QUICK = dict(steps=1, groups=1, group_size=3, scenarios=("single_call/plain", "two_calls/plain", "reasoning/plain"))


@needs_hub
def test_qwen3_r_gradient_corrupted_qwen25_not():
    q3 = run_rl(RLConfig(model=QWEN3, **QUICK))
    q25 = run_rl(RLConfig(model=QWEN25, **QUICK))
    g3, g25 = q3.steps[0]["gradient"], q25.steps[0]["gradient"]
    assert q3.summary["corrupted"] and g3["rel_error"] > 0.05 and q3.summary["noise_floor"] == 0.0
    assert q3.steps[0]["alignment"]["sequences_affected"] >= 2
    assert not q25.summary["corrupted"] and g25["bitwise_equal"]
    assert q25.steps[0]["alignment"]["mismatched_trained"] == 0
    # The model-free token facts cover every scenario the template renders, per scenario, whatever --scenario plays
    # (reasoning/plain in each of the three thinking modes: 5 played).
    facts = q3.setup["token_facts"]
    assert facts["by_scenario"]["two_calls/plain"]["turns_affected"] == 2 and facts["scenarios"] > 5
    # the facts also hold the episodes ended by a user turn after their answer, whose reasoning Qwen3 then drops
    # (audit.episode_cuts), one per thinking mode that plays reasoning: not scenarios the batches could play
    stopped = [name for name in facts["by_scenario"] if name.endswith(" ended by a user message")]
    assert len(stopped) == q3.setup["coverage"]["stopped_episodes"] == 2
    assert q3.summary["filtered"] == f"filtered: 5 of {facts['scenarios'] - len(stopped)} scenarios"
    assert q25.setup["token_facts"]["sequences_affected"] == 0
    assert q3.summary["parse_rate_batches"] == 1.0 and q3.summary["parse_rate_every_scenario"] == 1.0
    assert q25.summary["verdict"] == "identical" and "canonical samples only" in q25.summary["holds_for"]
    # Random weights: no probability numbers, an explanation instead.
    assert "kl" not in q3.steps[0] and "meaningless" in q3.steps[0]["probability_diagnostics"]


@needs_hub
def test_control_r_equals_b_is_exact_on_corrupting_template():
    res = run_rl(RLConfig(model=QWEN3, control=True, **QUICK))
    g = res.steps[0]["gradient"]
    assert g["norm_b"] > 0
    assert g["cosine"] == 1.0 and g["rel_error"] == 0.0 and not res.summary["corrupted"]
    assert res.steps[0]["alignment"]["sequences_affected"] == 0 and res.summary["control_passed"]
    # The batch compared B with itself; the token facts still describe the template (computed before R := B).
    assert res.summary["verdict"] == "control" and res.summary["sequences_affected"] > 0


@needs_hub
def test_noncanonical_splits_corrupt_even_prefix_preserving_template():
    res = run_rl(RLConfig(model=QWEN25, noncanonical_rate=0.3, **QUICK))
    assert res.steps[0]["alignment"]["noncanonical_rate"] > 0
    assert res.steps[0]["gradient"]["rel_error"] > 0


@needs_hub
def test_cli_bad_input_exits_2_with_one_line():
    r = CliRunner().invoke(_app(), ["rl", QWEN25, "--steps", "0"])
    assert r.exit_code == 2
    r = CliRunner().invoke(_app(), ["rl", "/nonexistent/folder/xyz"])
    assert r.exit_code == 2
    r = CliRunner().invoke(_app(), ["rl", QWEN25, "--warmup", "1", "--generation-kwargs", "{oops"])
    assert r.exit_code == 2
    # Sampling settings without a policy that samples: refused, naming the fix.
    r = CliRunner().invoke(_app(), ["rl", QWEN25, "--generation-kwargs", '{"top_k": 50}'])
    assert r.exit_code == 2 and "--warmup N or --weights PATH" in r.output


@needs_hub
@pytest.mark.slow
def test_warmup_sampling_save_and_reload_weights(tmp_path):
    out, pol = tmp_path / "out", tmp_path / "policy"
    args = [
        "rl",
        QWEN3,
        "--steps",
        "2",
        "--warmup",
        "15",
        "--groups",
        "1",
        "--group-size",
        "2",
        "--max-new-tokens",
        "12",
        "--scenario",
        "single_call/plain",
        "--scenario",
        "two_calls/plain",
        "--save-policy",
        str(pol),
        "--out",
        str(out),
        "--shadow",
    ]
    r = CliRunner().invoke(_app(), args)
    assert r.exit_code == 1, r.output  # Qwen3 rewrites history: corrupted
    m = json.loads((out / "metrics.json").read_text())
    s0, s1 = m["steps"]
    gates = m["setup"]["quality_gates"]
    # A 15-step warm-up does not learn the format: the gates say which figure failed, nothing is shown.
    assert not gates["passed"] and gates["failed"]
    assert "withheld: quality gates failed" in s0["probability_diagnostics"]
    assert "kl" not in s0 and s1["shadow_drift"] is not None
    assert s0["tool_calls"]["turns_expected"] > 0 and "parse_rate_batches" in m["summary"]
    assert s0["sampler_vs_trainer"]["abs_dlogp_max"] < 1e-4  # fp32 CPU: sampler and trainer agree
    for name in ("token_facts.png", "gradient.png", "dlogp_hist.png"):
        assert (out / name).stat().st_size > 1000
    assert (pol / "config.json").is_file() and (pol / "tito_vocab_map.json").is_file()
    # The saved folder loads back through the real-weights path (tokenizer and weights from the folder).
    r2 = CliRunner().invoke(
        _app(),
        [
            "rl",
            str(pol),
            "--weights",
            str(pol),
            "--steps",
            "1",
            "--groups",
            "1",
            "--group-size",
            "2",
            "--max-new-tokens",
            "12",
            "--scenario",
            "single_call/plain",
            "--scenario",
            "two_calls/plain",
            "--device",
            "cpu",
            "--json",
        ],
    )
    assert r2.exit_code == 1, r2.output
    # --json: stdout is the JSON object alone, the withheld-diagnostics note on stderr (it came first on stdout)
    summary = json.loads(r2.stdout)
    assert "probability diagnostics withheld" in r2.stderr
    assert summary["setup"]["policy"].startswith("weights")
    # The reloaded 15-step policy samples (pure) and is judged by the same gates.
    assert summary["setup"]["sampling"]["pure"] and not summary["setup"]["quality_gates"]["passed"]
    assert summary["setup"]["probability_diagnostics"].startswith("withheld: quality gates failed")
    assert os.path.basename(str(pol)) == "policy"
    # what produced them, in metrics.json and in --json (red team 49: rl named no library)
    import torch

    from tito_audit import __version__

    for named in (m["libraries"], summary["libraries"]):
        assert named["tito-audit"] == __version__ and named["torch"] == torch.__version__
        assert {"transformers", "tokenizers", "jinja2"} <= set(named)


@pytest.fixture(scope="module")
def passing(tmp_path_factory):
    """Two scenarios, 300 SFT steps, seed 1: the policy learns the format (docs/rl.md: "a warm-up that passes";
    seeds 0 and 2 fail the parse-rate gate on their first batch, which the gates report)."""
    out = tmp_path_factory.mktemp("passing")
    res = run_rl(
        RLConfig(
            model=QWEN3,
            warmup=300,
            seed=1,
            steps=2,
            scenarios=("single_call/plain", "two_calls/plain"),
            critical_budget=8,
            out_dir=str(out / "run"),
            save_policy=str(out / "policy"),
        )
    )
    return res, out


@needs_hub
@pytest.mark.slow
def test_warmup_that_passes_its_gates_shows_diagnostics(passing):
    res, out = passing
    gates = res.setup["quality_gates"]
    assert gates["passed"], gates
    s0, s1 = res.steps
    # KL to the frozen step-0 policy is exactly zero before the first update.
    assert s0["kl"]["k1_mean"] == 0.0 and s0["kl"]["exact_mean"] == 0.0 and not s0["kl"]["negative_kl"]
    assert s0["kl"]["bias"]["positions"] == s0["kl"]["tokens"] and s0["kl"]["degrees_of_freedom"] == 7
    low = s1["low_prob"]
    assert low["positive"]["tokens"] + low["negative"]["tokens"] + low["zero_advantage_tokens"] == low["tokens"]
    assert s1["critical"]["tested_positions"] > 0 and "mismatch_on" in s1 and "null_flips" in s1["critical"]
    assert s1["critical"]["vocab_size"] == res.setup["tokenizer_vocab"]  # J over the full vocabulary
    run = out / "run"
    assert (run / "kl.png").is_file() and (run / "quartiles.png").is_file()
    # The HTML report lists exactly the plots rl writes (a trained policy's run writes every one of them).
    assert sorted(p.name for p in run.glob("*.png")) == sorted(RL_PLOTS)


@needs_hub
@pytest.mark.slow
def test_separate_reference_gives_the_kl_section_power_and_top_k_its_exact_bias(passing, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    _res, out = passing
    policy = out / "policy"
    ref = tmp_path / "ref"
    model = AutoModelForCausalLM.from_pretrained(str(policy))
    with torch.no_grad():
        model.model.norm.weight.mul_(0.8)  # a flatter reference
    model.save_pretrained(ref)
    (ref / "tito_vocab_map.json").write_text((policy / "tito_vocab_map.json").read_text())
    common = dict(
        model=str(policy),
        weights=str(policy),
        ref=str(ref),
        steps=1,
        critical_budget=2,
        scenarios=("single_call/plain", "two_calls/plain"),
        seed=1,
    )
    pure = run_rl(RLConfig(**common))
    top_k = run_rl(RLConfig(**common, generation_kwargs='{"top_k": 2}'))
    kp, kt = pure.steps[0]["kl"], top_k.steps[0]["kl"]
    assert pure.setup["reference"].startswith("weights") and kp["exact_mean"] > 1e-3  # batch 0 has power
    # Pure sampling: k1 and k3 average to the exact KL at every visited position, up to the compacted
    # vocabulary's shared row, which the sampler never draws (its mass is the only truncation).
    bp, bt = kp["bias"], kt["bias"]
    assert abs(bp["bias_k1"]) < 0.01 * bp["kl"] and abs(bp["bias_k3"]) < 0.01 * bp["kl"]
    assert bp["truncated_mass"] < 1e-3 and not pure.steps[0]["kl"]["negative_kl"]
    # top_k = 2 truncates much more of the policy's mass and biases the estimators; the advice names the sampler.
    assert bt["truncated_mass"] > 10 * bp["truncated_mass"] and abs(bt["bias_k3"]) > 10 * abs(bp["bias_k3"])
    assert any(line.startswith("change the sampler") for line in top_k.summary["what_to_do"])
