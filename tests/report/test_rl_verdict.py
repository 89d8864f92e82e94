"""The rl verdict cannot be a false green: zero advantages, affected scenarios outside the played batch, a template
without tool calls, non-canonical samples, a context-only rewrite, a rewrite in one thinking mode, a --scenario
filter, --control, a non-canonical rate that split nothing; exit codes 0/1/2/3; options checked before anything is
loaded."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from typer.testing import CliRunner

from tests.conftest import snapshot
from tito_audit.cli import app
from tito_audit.policy.view import View
from tito_audit.report.rl_verdict import decide
from tito_audit.rl import RLConfig, run_rl
from tito_audit.rl import loop as rl_loop
from tito_audit.rl.diagnostics import alignment

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
    pattern = r"([\d,]+) of ([\d,]+) sampled tokens \((\d+\.\d+)%\) split non-canonically \(--noncanonical-rate 0.05\)"
    said = re.search(pattern, res.summary["holds_for"])
    assert said is not None, res.summary["holds_for"]
    split, sampled = (int(g.replace(",", "")) for g in said.groups()[:2])
    assert 0 < split < sampled and f"{100 * split / sampled:.2f}" == said.group(3) and 3 < float(said.group(3)) < 7
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
        (["--steps", "0"], "invalid value for '--steps': 0 is out of range"),
        (["--device", "gpu"], "--device must be auto, cpu, cuda or cuda:N"),
        (["--warmup", "1", "--generation-kwargs", "{oops"], "--generation-kwargs is not JSON"),
        (["--warmup", "1", "--generation-kwargs", '{"beam": 2}'], "unsupported key(s) beam"),
        (["--ref", "org/model"], "--ref is the reference of the KL section"),
        (["--ref", "/x"], "/x: cannot load weights: no such folder (--ref)"),
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


# -- the red team's false greens (issue 28, branch redteam-rl): A1-A5 ---------------------------------------------
TINY = dict(steps=1, groups=1, group_size=2)
LONG_COUNTER = (
    '{%- set ns = namespace(long=0) %}{%- for m in messages %}{%- if m.role == "tool" and m.content is string and '
    "m.content|length > 400 %}{%- set ns.long = ns.long + 1 %}{%- endif %}{%- endfor %}"
)


def _qwen25_with(tmp_path, edit) -> str:
    """A model folder: Qwen2.5's tokenizer and its template as ``edit`` rewrites it."""
    src = snapshot("Qwen/Qwen2.5-7B-Instruct")
    config = json.loads((src / "tokenizer_config.json").read_text(encoding="utf-8"))
    template = edit(config.pop("chat_template"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    shutil.copy(src / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "chat_template.jinja").write_text(template, encoding="utf-8")
    return str(tmp_path)


def _long_output_counter(template: str) -> str:
    # The system prompt counts long tool outputs: the buffer rendered it before any tool output (0), the re-render
    # after (1). Same length, so R's mask stays aligned: only the context of the trained tokens changes.
    edited = template.replace(
        "You are a helpful assistant.' }}", "You are a helpful assistant. Long tool outputs: ' + ns.long|string }}", 1
    )
    assert edited != template
    return LONG_COUNTER + edited


def _think_off_prompt(template: str) -> str:
    # Qwen3's empty think block in the generation prompt, only when enable_thinking is false: the history drops it.
    tail = "{{- '<|im_start|>assistant\\n' }}\n{%- endif %}"
    assert tail in template
    return template.replace(
        tail,
        "{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and enable_thinking is false %}"
        "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n{%- endif %}",
    )


def test_a_changed_context_of_trained_tokens_is_corrupted_whatever_the_batch_plays(tmp_path):
    # A1: no trained token changes, but in the long-output scenarios every trained token follows another system
    # prompt, so its log-prob and the gradient differ. Batch 0 plays two unaffected scenarios (bitwise equal).
    res = run_rl(RLConfig(model=_qwen25_with(tmp_path, _long_output_counter), **TINY))
    assert res.summary["verdict"] == "corrupted" and res.summary["exit_code"] == 1
    assert any("trained tokens whose context R changes" in r for r in res.summary["reasons"])
    facts = res.setup["token_facts"]
    assert res.steps[0]["gradient"]["bitwise_equal"] and res.steps[0]["alignment"]["sequences_affected"] == 0
    assert facts["mismatched_trained"] == facts["flip_sampled_dropped"] == facts["flip_template_trained"] == 0
    row = facts["by_scenario"]["single_call/long_output"]
    assert row["context_changed_trained"] == row["b_trained"] > 0 and row["turns_context_only"] == row["turns"]


def test_context_facts_of_one_sequence():
    # The same trained ids after a different context id count as context changes; after the same context they do
    # not; a difference after the last trained token changes no loss.
    clean = {k: 0 for k in ("mismatched_trained", "flip_sampled_dropped", "flip_template_trained", "naive_crashes")}
    step = {"step": 0, "noise_floor": 0.0, "gradient": {"rel_error": 0.0, "cosine": 1.0}}
    out = decide([step], {"token_facts": clean | {"context_changed_trained": 3}, "template_parse_rate": 1.0}, {})
    assert out["verdict"] == "corrupted"
    b = View([1, 2, 3, 4, 9], [0, 0, 1, 1, 0])
    assert alignment(b, View([1, 7, 3, 4, 9], [0, 0, 1, 1, 0]))["context_changed_trained"] == 2
    assert alignment(b, View([1, 2, 3, 4, 8], [0, 0, 1, 1, 0]))["context_changed_trained"] == 0


def test_rl_plays_the_thinking_modes_the_audit_plays(tmp_path):
    # A2: the template rewrites only with enable_thinking=false; the default mode alone is identical.
    model = _qwen25_with(tmp_path, _think_off_prompt)
    res = run_rl(RLConfig(model=model, scenarios=("single_call/plain", "reasoning/plain"), **TINY))
    assert res.summary["verdict"] == "corrupted"
    assert "thinking modes default, enable_thinking=true, enable_thinking=false" in res.summary["holds_for"]
    modes = res.setup["token_facts"]["by_mode"]
    assert set(modes) == {"default", "enable_thinking=true", "enable_thinking=false"}
    assert modes["default"]["sequences_affected"] == modes["enable_thinking=true"]["sequences_affected"] == 0
    assert modes["enable_thinking=false"]["sequences_affected"] == modes["enable_thinking=false"]["sequences"] > 0
    tiny = ("--steps", "1", "--group-size", "2", "--groups", "1", "--thinking", "unset")
    unset = _rl(model, *tiny)
    assert unset.exit_code == 0 and "default mode only (enable_thinking not played: --thinking unset)" in unset.output
    forced = _rl(model, *tiny, "-k", "enable_thinking=false")
    assert forced.exit_code == 1 and "-k enable_thinking=false" in forced.output


def test_a_scenario_filter_is_named_and_cannot_hide_affected_scenarios():
    # A3: Phi-3's affected scenarios (whitespace) are left out by the filter; their facts still count.
    phi = _rl(str(snapshot("microsoft/Phi-3-mini-4k-instruct")), "--steps", "1", "--json",
              "--scenario", "single_call/plain", "--scenario", "two_calls/plain")  # fmt: skip
    assert phi.exit_code == 1, phi.output
    summary = json.loads(phi.stdout)["summary"]
    total = json.loads(phi.stdout)["setup"]["coverage"]["scenarios"]  # every scenario the template renders
    assert total > 2 and summary["verdict"] == "corrupted"
    assert summary["filtered"] == f"filtered: 2 of {total} scenarios"
    assert any("affected scenarios are outside --scenario" in r for r in summary["reasons"])
    q25 = _rl(str(snapshot("Qwen/Qwen2.5-7B-Instruct")), "--steps", "1", "--scenario", "single_call/plain",
              "--scenario", "two_calls/plain")  # fmt: skip
    total = int(re.search(r"filtered: 2 of (\d+) scenarios \(--scenario\)", q25.output).group(1))  # type: ignore[union-attr]
    assert q25.exit_code == 0 and total > 2
    assert f"the gradients cover only those, the token facts all {total}" in q25.output
    assert f"token facts (all {total} scenarios the template renders" in q25.output


def test_control_reports_the_template_facts_and_is_never_its_identical():
    # A4: R := B for the comparison only; the facts are the template's (computed before), the exit code 3.
    r = _rl(str(snapshot("Qwen/Qwen3-0.6B")), "--steps", "1", "--group-size", "2", "--groups", "1", "--control",
            "--json")  # fmt: skip
    assert r.exit_code == 3, r.output
    out = json.loads(r.stdout)
    assert out["summary"]["verdict"] == "control" and out["summary"]["control_passed"]
    assert out["summary"]["sequences_affected"] == out["setup"]["token_facts"]["sequences_affected"] > 0
    assert out["summary"]["mismatched_trained"] > 0


def test_a_noncanonical_rate_that_split_nothing_claims_no_sampler():
    # A5: 0.0001 splits no token of the 37 scenarios: the verdict holds for canonical samples only and says so.
    res = run_rl(RLConfig(model=str(snapshot("Qwen/Qwen2.5-7B-Instruct")), noncanonical_rate=0.0001, **TINY))
    assert "--noncanonical-rate 0.0001 split no sampled token" in res.summary["holds_for"]
    assert not res.summary["holds_for"].startswith("samples with")
    assert res.setup["noncanonical_splits"]["tokens"] == 0 and res.summary["verdict"] == "identical"
