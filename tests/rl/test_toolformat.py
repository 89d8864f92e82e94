"""The tool-call format learnt from each shared template parses the calls its own buffer sampled."""

from __future__ import annotations

import pytest

from tests.conftest import SHARED_MODELS
from tito_audit.rendering import Renderer
from tito_audit.rl.episodes import canonical_episodes
from tito_audit.rl.toolformat import learn_format
from tito_audit.rollout import stop_token_ids
from tito_audit.scenarios import build_scenarios

SCENARIOS = [s for s in build_scenarios() if "special_text" not in s.id]


def _setup(loaded, repo):
    m = loaded(repo)
    r = Renderer(m.tokenizer, m.chat_template)
    return r, stop_token_ids(m.tokenizer, r, m.generation_eos_ids)


@pytest.mark.parametrize("repo", SHARED_MODELS)
def test_r_parses_the_calls_b_sampled(loaded, repo):
    r, stops = _setup(loaded, repo)
    fmt = learn_format(r, stops)
    episodes, _ = canonical_episodes(r, SCENARIOS, stops)
    facts = [f for e in episodes for f in e.parses]
    checked = [f for f in facts if f["calls_ok"] is not None]
    if fmt.parses_calls:
        # Every sampled turn with calls the template can show parses back to the same calls.
        assert len(checked) >= 30, fmt.describe()
        assert all(f["calls_ok"] for f in checked), [f for f in checked if not f["calls_ok"]][:3]
    else:
        # The template cannot show a call: the call stays text in the content, nothing is claimed parsed.
        assert "does not render tool calls" in fmt.reason and not checked


def test_learnt_formats_differ_by_family_without_a_name_switch(loaded):
    hermes = learn_format(*_setup(loaded, "Qwen/Qwen2.5-7B-Instruct"))
    mistral = learn_format(*_setup(loaded, "mistralai/Mistral-Nemo-Instruct-2407"))
    assert hermes.parse('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>')["tool_calls"][0][
        "function"
    ] == {"name": "f", "arguments": {"a": 1}}
    got = mistral.parse(
        '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}, "id": "abcdefghi"}, '
        '{"name": "g", "arguments": {}, "id": "jklmnopqr"}]'
    )
    assert [c["function"]["name"] for c in got["tool_calls"]] == ["f", "g"] and got["content"] == ""
    assert got["tool_calls"][1]["id"] == "jklmnopqr"
    # Hermes text is no call for Mistral's format, and the reverse.
    assert "tool_calls" not in mistral.parse('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>')


def test_qwen3_reasoning_and_content_come_back_apart(loaded):
    fmt = learn_format(*_setup(loaded, "Qwen/Qwen3-0.6B"))
    got = fmt.parse(
        '<think>\nhmm\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        ["call00001"],
    )
    assert got["reasoning_content"] == "hmm" and got["content"] == ""
    assert got["tool_calls"][0]["id"] == "call00001"
    assert fmt.parse("<think>\n\n</think>\n\nIt is sunny.")["content"] == "It is sunny."


@pytest.mark.parametrize("repo", SHARED_MODELS)
def test_rl_runs_on_every_shared_model_with_per_turn_token_facts(repo):
    from tests.conftest import snapshot
    from tito_audit.rl import RLConfig, run_rl

    res = run_rl(RLConfig(model=str(snapshot(repo)), steps=1, groups=1, group_size=2))
    facts = res.setup["token_facts"]
    assert facts["scenarios"] >= 30 and facts["turns"] > facts["sequences"]
    assert res.summary["parse_rate_every_scenario"] in (1.0, None)
    rows = res.steps[0]["worst_sequences"][0]["turns"]
    assert rows and all("mismatched_trained" in t for t in rows)
    # Corrupted exactly when some scenario's trained tokens change (the played batch alone does not decide), and a
    # template that shows no tool call is never "identical".
    changed = facts["mismatched_trained"] + facts["flip_sampled_dropped"] + facts["flip_template_trained"]
    assert res.summary["corrupted"] == (changed + facts["naive_crashes"] > 0)
    if res.summary["parse_rate_every_scenario"] is None:
        assert res.summary["verdict"] in ("corrupted", "not_applicable")
