"""The audit on the real shared models: verdicts, the known pitfalls, and agreement with TRL's check."""

from __future__ import annotations

import json

import pytest

from tests.conftest import SHARED_MODELS
from tito_audit.report.model_report import SCHEMA_VERSION, AuditReport


def test_qwen3_is_unsafe_because_think_block_is_dropped(report):
    r = report("Qwen/Qwen3-0.6B")
    assert r.verdict == "unsafe"
    c = r.check("tool_append_prefix")
    assert c.status == "fail"
    f = c.findings[0]
    assert f.expected is not None and f.actual is not None
    divergent = f.expected.tokens[f.index - f.context_start]
    assert divergent == "<think>"  # the empty think block of the last turn disappears once a tool result follows
    assert r.check("history_rewrite").status == "warn"
    assert {x.cls for x in r.check("naive_rerender").findings} == {"history_rewrite"}
    assert any(x.affected_trainable > 0 for x in r.check("naive_rerender").findings)


def test_qwen25_is_safe(report):
    r = report("Qwen/Qwen2.5-7B-Instruct")
    assert r.verdict == "safe"
    for check_id in ("tool_append_prefix", "naive_rerender", "history_rewrite", "append_matrix", "delta_context"):
        assert r.check(check_id).status == "pass", check_id
    assert r.check("stop_boundary").data["trailing_after_stop"] == ["\n"]  # <|im_end|> then "\n"


def test_mistral_gets_a_real_verdict_where_trl_errors(report):
    r = report("mistralai/Mistral-Nemo-Instruct-2407")
    assert r.check("tool_append_prefix").status == "pass"
    assert r.verdict in ("tito-required", "safe")
    # The system prompt is rendered inside the last user turn only, so it moves as the conversation grows.
    assert r.check("generation_prompt").status == "warn"


def test_gemma_adapts_role_alternation_and_reports_tool_role(report):
    r = report("google/gemma-2-2b-it")
    assert r.verdict != "error"
    assert any("tool_as_user" in a for a in r.scenarios["adapted"].values())
    assert r.check("tool_support").status == "fail"
    assert "end_of_turn" in r.check("stop_boundary").summary and "<eos>" in r.check("stop_boundary").summary
    assert r.check("double_bos").status == "warn"


def test_llama_injects_the_date_and_doubles_bos(report):
    r = report("meta-llama/Llama-3.2-3B-Instruct")
    assert r.check("time_invariance").status == "warn"
    assert r.check("time_invariance").findings[0].cls == "date"
    assert r.check("double_bos").status == "warn"
    assert "single tool-calls" in " ".join(r.scenarios["not_applicable"].values())


def test_gpt_oss_renders_only_the_first_parallel_call(report):
    """A drop confined to the second call of a parallel pair keeps the verdict, with the form to avoid."""
    r = report("openai/gpt-oss-20b")
    msgs = [f.message for f in r.check("tool_forms").findings]
    assert any(m.startswith("parallel tool call #2 (search_docs) of 2") for m in msgs), msgs
    assert r.check("tool_support").status == "pass"
    assert r.verdict == "tito-required" and "avoid:parallel_calls" in r.verdict_reasons


def test_gpt_oss_stops_on_call_and_return_and_rewrites_history(report):
    r = report("openai/gpt-oss-20b")
    assert set(r.scenarios["stop_tokens"]) >= {"<|return|>", "<|call|>"}
    assert r.verdict == "tito-required"
    assert r.check("history_rewrite").status == "warn"


def test_deepseek_v3_drops_tool_calls_with_empty_content(report):
    """Its calls render only when content is None, which transformers drops from the message (the template then
    fails on the missing key): no shape shows the calls, so the model never sees them and the verdict is unsafe."""
    r = report("deepseek-ai/DeepSeek-V3")
    assert r.check("tool_support").status == "fail"
    assert any("not rendered" in f.message for f in r.check("tool_support").findings)
    assert r.verdict == "unsafe" and "unsafe:drops_tool_calls" in r.verdict_reasons
    assert "content_empty" in r.scenarios["adaptations"] and r.scenarios["played"] >= 30


def test_deepseek_v3_hoists_system_messages_which_is_not_a_tool_append_break(report):
    r = report("deepseek-ai/DeepSeek-V3")
    # A system notice appended with a tool result moves to the top of the prompt: that rewrite belongs to the
    # system append (append_matrix), the tool result alone appends cleanly (as TRL's probe also finds).
    assert r.check("tool_append_prefix").status == "pass"
    assert r.check("append_matrix").status == "warn"
    assert any("system after" in f.message for f in r.check("append_matrix").findings)
    assert "unsafe:rewrites_on_tool_append" not in r.verdict_reasons


def test_phi3_turn_end_is_not_eos(report):
    r = report("microsoft/Phi-3-mini-4k-instruct")
    assert any("'<|end|>'" in f.message for f in r.check("stop_boundary").findings)


def test_phi3_engine_stopping_on_eos_keeps_text_the_template_drops_on_append(report):
    r = report("microsoft/Phi-3-mini-4k-instruct")
    c = r.check("tool_append_prefix")
    assert c.status == "fail"
    # Only <|endoftext|> is a configured stop, so the buffer holds '<|end|>' '\n' '<|endoftext|>'; once a tool
    # result follows, the template writes '<|assistant|>' where the buffer has '<|endoftext|>'.
    [f] = c.findings
    assert f.scenario == "probe/configured-stop" and f.cls == "stop_seam"
    assert f.expected is not None and f.actual is not None
    at = f.index - f.context_start
    assert (f.expected.tokens[at], f.actual.tokens[at]) == ("<|endoftext|>", "<|assistant|>")
    assert r.verdict == "unsafe"
    # The tool results themselves never render: tool_support says so.
    assert any("does not appear" in x.message for x in r.check("tool_support").findings)


def test_olmo2_drops_tool_messages_but_appends_preserve_the_prefix(report):
    r = report("allenai/OLMo-2-1124-7B-Instruct")
    assert r.check("tool_append_prefix").status == "pass"
    assert any("does not appear" in x.message for x in r.check("tool_support").findings)
    assert r.verdict == "unsafe" and {"unsafe:drops_tool_calls", "unsafe:drops_tool_results"} <= set(r.verdict_reasons)


def test_qwen3_thinking_modes_come_from_the_template(report):
    r = report("Qwen/Qwen3-0.6B")
    assert {"enable_thinking": False} in r.scenarios["thinking_modes"]
    matrix = r.check("append_matrix").data["matrix"]
    assert set(matrix) == {"default", "enable_thinking=True", "enable_thinking=False"}
    assert matrix["default"]["user after answer"] == "fail"


def test_every_shared_model_gets_a_verdict_and_valid_json(report):
    reports = [report(m) for m in SHARED_MODELS]
    assert all(r.verdict in ("unsafe", "tito-required", "safe") for r in reports)
    assert all(r.scenarios["played"] >= 30 for r in reports), {r.model: r.scenarios["played"] for r in reports}
    for r in reports:  # never safe or tito-required while an error-level check fails
        if r.verdict != "unsafe":
            assert all(c.status != "fail" for c in r.checks if c.severity == "error"), r.model
    doc = json.loads(json.dumps(AuditReport(reports).to_dict()))
    assert doc["schema_version"] == SCHEMA_VERSION
    for m in doc["models"]:
        assert set(m) >= {"model", "provenance", "verdict", "error", "checks"}
        for c in m["checks"]:
            assert set(c) >= {"id", "status", "severity", "summary", "findings"}
            assert c["status"] in ("pass", "warn", "fail", "not_applicable", "error")


def _trl_prefix_preserving(tokenizer):
    trl_utils = pytest.importorskip("trl.chat_template_utils")
    try:
        return trl_utils.is_chat_template_prefix_preserving(tokenizer)
    except Exception:
        return None  # TRL's own check errors on this template


@pytest.mark.parametrize("model", SHARED_MODELS)
def test_tool_append_prefix_agrees_with_trl(model, loaded, report):
    trl_says = _trl_prefix_preserving(loaded(model).tokenizer)
    ours = report(model).check("tool_append_prefix").status
    if trl_says is None:
        assert ours in ("pass", "fail")  # a real verdict where TRL has none
    else:
        assert (ours == "pass") == trl_says
