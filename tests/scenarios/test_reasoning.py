"""Reasoning and message fields are played in the form each template reads them (issue 33 item 1, issue 32's blind
spots), on templates written for these tests (tests/data/reasoning/) and on real corpus templates.

Every template here drops, strips or rewrites something a model samples; played with ``<think>`` and
``reasoning_content`` only, each one came out SAFE or missed the rewrite."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tests.conftest import CORPUS, audit_of, needs_corpus
from tests.conftest import DATA as TEST_DATA
from tito_audit import load
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.cli import app

DATA = TEST_DATA / "reasoning"
TOKENIZER = "qwen2.5-7b-instruct"  # bundled: none of these templates' delimiters is one of its tokens


def audited(name: str):
    return audit_of(TOKENIZER, DATA / f"{name}.jinja")


def findings(report, check: str, scenario: str = ""):
    return [f for f in report.check(check).findings if f.scenario.startswith(scenario)]


@pytest.mark.parametrize(
    "name",
    [
        "inline_think_brackets",  # [THINK]...[/THINK]
        "inline_thought",  # <thought>...</thought>
        "inline_thinking",  # <thinking>...</thinking>
        "inline_seed_think",  # <seed:think>...</seed:think>
        "inline_reasoning",  # <reasoning>...</reasoning>
        "field_reasoning",  # the message field `reasoning`, written in [THINK]
    ],
)
def test_earlier_reasoning_dropped_under_any_delimiter_or_field_is_not_safe(name: str) -> None:
    r = audited(name)
    assert r.verdict == "tito-required", r.verdict_reasons
    assert "tito-required:rewrites_on_append" in r.verdict_reasons
    rewrites = findings(r, "history_rewrite", "reasoning")
    assert rewrites and all(f.cls == "history_rewrite" for f in rewrites)
    # the inline_think scenario is written in the template's own delimiters, not in <think>
    mode = AuditContext(load(TOKENIZER, chat_template_file=str(DATA / f"{name}.jinja")), AuditOptions()).shapes
    assert mode.reasoning.mode in ("inline", "field")


def test_the_inline_pair_is_the_templates_own() -> None:
    model = load(TOKENIZER, chat_template_file=str(DATA / "inline_think_brackets.jinja"))
    ctx = AuditContext(model, AuditOptions())
    assert ctx.shapes.reasoning.tags == ("[THINK]", "[/THINK]")
    played = next(s for s in ctx.simulations if s.scenario.id == "inline_think/plain")
    said = [m["content"] for m in played.messages if m["role"] == "assistant"]
    assert all("[THINK]" in c and "<think>" not in c for c in said)


@pytest.mark.parametrize("name", ["emitted_thought", "channel_answers"])
def test_reasoning_the_template_strips_on_every_turn_is_emitted_and_lost_on_rerender(name: str) -> None:
    """<thought> (EXAONE-Deep) and a Gemma-4 thought channel: no render shows them, yet the model samples them."""
    r = audited(name)
    assert r.verdict == "tito-required" and "adapt:reasoning_emitted" in r.verdict_reasons
    lost = findings(r, "naive_rerender", "reasoning")
    assert lost and {f.cls for f in lost} == {"history_rewrite"}


@pytest.mark.parametrize("thinking", ["both", "on"])
def test_reasoning_a_switch_strips_on_every_turn_is_emitted_in_that_mode(thinking: str) -> None:
    """Red team 48 (Hermes-4's thinking mode): inline reasoning is written as sent by default, and replaced on every
    turn, the last one's too, under the template's ``think`` switch. The form is derived in the mode that treats the
    delimiters; read in the default mode alone, no reasoning reached the render and the audit said SAFE."""
    r = audit_of(TOKENIZER, DATA / "switch_emits.jinja", thinking=thinking)
    assert r.verdict == "tito-required", r.verdict_reasons
    assert "adapt:reasoning_emitted" in r.verdict_reasons and "tito-required:naive_rerender" in r.verdict_reasons
    lost = [f for f in r.check("naive_rerender").findings if "[think=true]" in f.scenario]
    assert lost and {f.cls for f in lost} == {"history_rewrite"}


@pytest.mark.parametrize(
    ("name", "mode"),
    [("switch_strips_answers", "[enable_thinking=true]"), ("string_switch_strips", 'switch/reasoning_mode="hide"')],
)
def test_a_switch_that_changes_only_an_answers_reasoning_is_played(name: str, mode: str) -> None:
    """Red team 50: ``enable_thinking`` (or ``reasoning_mode == 'hide'``) splits every answer at ``</think>``; a
    render without reasoning is the same either way, so the switch was never found and the audit said SAFE. A probe
    whose earlier answer holds reasoning finds the boolean switch; the reasoning form is read under every switch
    value played as well. Checked by hand: the sampled block is in no render of that mode (TITO-REQUIRED)."""
    r = audited(name)
    assert r.verdict == "tito-required", r.verdict_reasons
    assert "adapt:reasoning_emitted" in r.verdict_reasons
    assert any(mode in f.scenario for f in r.check("naive_rerender").findings)


def test_a_switch_that_touches_no_reasoning_stays_safe() -> None:
    """The control: the same template whose switch changes nothing reasoning shows is SAFE as before."""
    r = audited("switch_reads_no_reasoning")
    assert r.verdict == "safe", r.verdict_reasons


def test_a_thinking_mode_in_which_every_scenario_is_refused_is_named() -> None:
    """A switch whose mode refuses every assistant turn: the mode is in the report's modes, nothing was judged in
    it, and the verdict says so (SAFE for what was played, exit 3), never a clean SAFE."""
    r = audit_of(TOKENIZER, DATA / "mode_refused.jinja")
    assert {"thinking": True} in r.scenarios["thinking_modes"]
    assert "not_probed:mode:thinking=true" in r.verdict_reasons
    assert "not_probed:mode:thinking=false" not in r.verdict_reasons


def test_channel_reasoning_on_tool_calls_is_played_and_emitted_on_answers() -> None:
    """Gemma-4-like: the thought channel of a tool-call turn renders until a user turn follows; an answer's is
    stripped. The rewrite is named as reasoning (a history rewrite), not as JSON."""
    r = audited("channel")
    assert "adapt:reasoning_emitted" in r.verdict_reasons
    rewrites = findings(r, "history_rewrite", "reasoning_followup")
    assert rewrites and rewrites[0].cls == "history_rewrite"


def test_reasoning_on_tool_call_turns_is_probed() -> None:
    """Kimi-K2.5-like: a call's reasoning renders while its tool cycle is open and is dropped once an answer
    completes it. Probing reasoning only on answers missed it (history_rewrite passed)."""
    r = audited("tool_cycle")
    ctx = AuditContext(load(TOKENIZER, chat_template_file=str(DATA / "tool_cycle.jinja")), AuditOptions())
    reasoning = ctx.shapes.reasoning
    assert (reasoning.mode, reasoning.on_calls, reasoning.on_answers) == ("field", True, False)
    rewritten = findings(r, "history_rewrite", "reasoning/plain")
    assert rewritten and "assistant message 1" in rewritten[0].message  # the tool-call turn
    # rewritten once the answer is sampled, with no append the buffer refuses: history_rewrite's own reason
    assert "tito-required:history_rewrite" in r.verdict_reasons


def test_empty_reasoning_is_played() -> None:
    """An empty block renders only while its turn is last: appending a tool result rewrites it."""
    r = audited("empty_reasoning")
    assert r.verdict == "unsafe"
    assert findings(r, "tool_append_prefix", "reasoning_empty")
    assert any(s.startswith("reasoning_empty/plain") for s in r.scenarios["adapted"]) or r.scenarios["played"]


def test_a_message_key_the_template_reads_is_played() -> None:
    """An assistant `task` marker written at the end of a turn and dropped once a user turn follows."""
    r = audited("task_field")
    assert r.verdict == "tito-required"
    rewrites = findings(r, "history_rewrite", "field/task")
    assert rewrites and rewrites[0].cls == "history_rewrite"


@pytest.mark.parametrize(
    ("name", "reason", "words"),
    [
        ("unprobed_field", "not_probed:field:thought", "message field 'thought' not probed"),
        ("unprobed_reasoning", "not_probed:reasoning:answers", "reasoning not probed on answers"),
    ],
)
def test_what_no_scenario_exercises_is_named_in_every_verdict_line(name: str, reason: str, words: str) -> None:
    r = audited(name)
    assert r.verdict == "safe" and reason in r.verdict_reasons
    out = CliRunner().invoke(
        app, ["audit", TOKENIZER, "--chat-template", str(DATA / f"{name}.jinja"), "--quiet", "--offline"]
    )
    assert words in out.stdout, out.stdout
    doc = CliRunner().invoke(
        app, ["audit", TOKENIZER, "--chat-template", str(DATA / f"{name}.jinja"), "--format", "json", "--offline"]
    )
    model = json.loads(doc.stdout)["models"][0]
    assert reason.split(":", 1)[1] in model["scenarios"]["not_probed"]


def test_a_template_without_reasoning_renders_no_probe() -> None:
    """Deriving costs nothing where there is nothing to derive: Qwen2.5 reads no key beyond the standard ones."""
    from tito_audit.rendering.analysis import message_reads

    model = load(TOKENIZER)
    reads = message_reads(model.chat_template)
    assert reads.message_keys <= {"role", "content", "tool_calls", "name", "tool_call_id"}
    reasoning = AuditContext(model, AuditOptions()).shapes.reasoning
    assert (reasoning.mode, reasoning.fields, reasoning.not_probed) == ("", (), ())


# --- real templates of the corpus ------------------------------------------------------------------------------


def corpus_shapes(name: str):
    model = load(TOKENIZER, chat_template_file=str(CORPUS / f"{name}.jinja"))
    return AuditContext(model, AuditOptions()).shapes.reasoning


@needs_corpus
@pytest.mark.parametrize(
    ("name", "mode", "field", "tags", "on_answers"),
    [
        ("moonshotai-Kimi-K2.5", "field", "reasoning_content", ("<think>", "</think>"), False),
        ("google-gemma-4-31B-it", "field", "reasoning_content", ("<|channel>thought", "<channel|>"), False),
        ("ByteDance-Seed-OSS", "field", "reasoning_content", ("<seed:think>", "</seed:think>"), True),
        ("unsloth-gpt-oss-20b", "field", "thinking", None, True),  # harmony's analysis channel
        ("LGAI-EXAONE-EXAONE-Deep-7.8B", "emitted", "reasoning_content", ("<thought>", "</thought>"), True),
        ("RekaAI-reka-flash-3", "emitted", "reasoning_content", ("<reasoning>", "</reasoning>"), True),
        ("Qwen-Qwen3-0.6B", "field", "reasoning_content", ("<think>", "</think>"), True),
        ("NousResearch-Hermes-4-14B", "emitted", "reasoning_content", ("<think>", "</think>"), True),  # `thinking`
    ],
)
def test_corpus_templates_are_read_in_their_own_reasoning_form(name, mode, field, tags, on_answers) -> None:
    r = corpus_shapes(name)
    assert (r.mode, r.field, r.on_answers) == (mode, field, on_answers)
    if tags is not None:
        assert r.tags == tags
    else:
        assert "analysis" in r.tags[0]


@needs_corpus
def test_hermes_4_in_its_thinking_mode_is_not_safe() -> None:
    """Red team 48: the real Hermes-4-14B template on the Qwen3 tokenizer (a Qwen3 fine-tune). Its ``thinking`` mode
    writes every assistant turn as ``<think> </think>`` plus what follows the model's ``</think>``: the sampled
    reasoning is in no render (TITO-REQUIRED, checked by hand with ``apply_chat_template``). It was SAFE."""
    r = audit_of("qwen3-0.6b", CORPUS / "NousResearch-Hermes-4-14B.jinja")
    assert r.verdict == "tito-required", r.verdict_reasons
    assert "adapt:reasoning_emitted" in r.verdict_reasons
    assert any("[thinking=true]" in f.scenario for f in r.check("naive_rerender").findings)


@needs_corpus
def test_message_keys_are_read_per_template() -> None:
    """DeepSeek-V4's `task` on user messages, Apriel's `thought`: keys beyond the standard ones, read from its code."""
    from tito_audit.rendering.analysis import message_reads

    v4 = (CORPUS / "unsloth-DeepSeek-V4-Flash.jinja").read_text()
    assert {"task", "reasoning_content"} <= message_reads(v4).message_keys
    r = corpus_shapes("unsloth-DeepSeek-V4-Flash")  # reasoning only renders with thinking on: probed there too
    assert r.mode == "field" and ("task", ("user",)) in r.fields
    apriel = corpus_shapes("ServiceNow-AI-Apriel-1.6-15b-Thinker")
    assert "field:thought" in apriel.not_probed


@needs_corpus
def test_a_key_that_takes_the_place_of_the_calls_is_not_played_as_a_field() -> None:
    """OLMo-Hybrid-Think writes `function_calls` instead of `tool_calls`: set with a value, it replaces the calls.
    Played as a field it would read as dropped tool calls; it is named as not probed instead."""
    r = corpus_shapes("allenai-Olmo-Hybrid-Think-SFT-7B")
    assert "replaces:function_calls" in r.not_probed
    assert "function_calls" not in {k for k, _ in r.fields} and r.field != "function_calls"
