"""Renderers other than the chat template (tito_audit.engines): each adapter on its real library, offline, through
the same seam as a template, and engine/trainer pairs compared at the first divergent token."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT, audit_of, needs_hub
from tito_audit import load
from tito_audit.audit.checks.base import run_check
from tito_audit.audit.checks.renderer_pair import PAIR
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.audit.parallel import audit_models as audit
from tito_audit.audit.search.conversations import declarations
from tito_audit.audit.search.property import play
from tito_audit.cli import app
from tito_audit.engines.base import RendererUnavailable
from tito_audit.engines.resolve import engine_for
from tito_audit.errors import EXIT_OPERATIONAL
from tito_audit.scenarios.searched import Conversation


def audited(model: str, renderer: str | None, trainer: str | None = None, **kwargs: object):
    return audit_of(model, renderer=renderer, train_renderer=trainer, **kwargs)


def pair_data(report) -> dict:
    check = report.check("renderer_pair")
    assert check.verdict_role == "tito-required" and check.status in ("pass", "fail")
    return check.data


def forged_by_the_engine(model: str, divergence: dict) -> bool:
    """The engine fed a control token where the trainer (the template, sanitized) has its text as plain text: the
    engine encoded control-token text in user or tool content as the control token."""
    tokenizer = load(model).tokenizer
    token = divergence["engine_token"]
    return (
        divergence["scenario"].endswith("/special_text")
        and tokenizer.convert_tokens_to_ids(token) in tokenizer.all_special_ids + list(tokenizer.added_tokens_decoder)
        and token.startswith(divergence["trainer_token"])
        and divergence["trainer_token"] != token
    )


def test_renderers_family_is_what_every_check_sees():
    """``renderers`` picks qwen3 from the model's Hub id; the buffer the checks read holds the library's own ids."""
    import renderers

    model = load("qwen3-0.6b")
    ctx = AuditContext(model, AuditOptions(renderer="renderers"))
    assert ctx.engine.name == "renderers@qwen3" and not ctx.engine.is_template
    library = renderers.create_renderer(model.tokenizer, renderers.config_from_name("qwen3"))
    sims = [s for s in ctx.simulations if s.ok and not s.scenario.kwargs]
    assert len(sims) >= 10
    for sim in sims[:10]:
        first = sim.turns[0]
        prompt = library.render_ids(
            sim.messages[: first.index], tools=list(sim.scenario.tools), add_generation_prompt=True
        )
        assert sim.trajectory is not None and sim.trajectory.input_ids[: len(prompt)] == prompt
    assert ctx.stop_ids == tuple(library.get_stop_token_ids())


def test_single_renderer_audit_runs_every_check():
    report = audited("qwen3-0.6b", "renderers")
    assert report.error is None and report.scenarios["played"] >= 30
    assert report.renderers == {"engine": report.renderers["engine"], "trainer": None}
    assert report.renderers["engine"]["name"] == "renderers@qwen3"
    assert not [c.id for c in report.checks if c.status == "error"]
    assert report.check("loss_mask").status == "not_applicable"  # no template markers to read
    assert "renderer_pair" not in [c.id for c in report.checks]


def test_mistral_common_picks_the_shipped_tokenizer_of_the_model():
    model = load("mistral-nemo-instruct-2407")
    engine = engine_for("mistral-common", model)
    assert engine.info.detail["tokenizer_file"] == "tekken_240718.json"
    assert engine.stop_ids() == (model.tokenizer.convert_tokens_to_ids("</s>"),)
    with pytest.raises(RendererUnavailable, match="not this model's"):
        engine_for("mistral-common@tekken_240718.json", load("qwen3-0.6b"))


def test_harmony_rebuilds_its_vocabulary_offline_and_says_so(monkeypatch):
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    engine = engine_for("openai-harmony", load("gpt-oss-20b"))
    assert "rebuilt offline from the model's tokenizer.json" in engine.info.offline
    assert "hash check" in engine.info.offline
    assert engine.stop_ids() == (200002, 200012)  # <|return|>, <|call|>


def test_harmony_without_its_vocabulary_is_an_error_not_a_pass(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_ENCODINGS_BASE", str(tmp_path))  # an empty folder: harmony finds nothing there
    (report,) = audit(["gpt-oss-20b"], AuditOptions(renderer="openai-harmony")).models
    assert report.verdict == "error" and report.error_kind == "renderer_unavailable"
    assert "o200k_base.tiktoken" in (report.error or "") and not report.checks


def test_harmony_refuses_a_vocabulary_that_is_not_its_own(monkeypatch):
    """Qwen3's tokenizer is byte-level BPE too: the file rebuilt from it fails harmony's hash check."""
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    with pytest.raises(RendererUnavailable, match="hash mismatch"):
        engine_for("openai-harmony", load("qwen3-0.6b"))
    with pytest.raises(RendererUnavailable, match="not byte-level BPE"):
        engine_for("openai-harmony", load("phi-3-mini-4k-instruct"))


def test_pair_harmony_engine_against_the_hf_template():
    """vLLM's gpt-oss renderer and the HF template part in the tools header: harmony writes an object parameter's
    fields, the template writes ``object`` (the scenarios, no search). A searched conversation finds more when it
    declares an array parameter, which harmony writes ``Array<any>`` and the template ``any[]``. It is played here as
    the search plays one (``property.play``), not drawn: harmony renders slowly, the search stops on its CPU after 15
    to 29 draws, and which draw (if any) breaks the property there depends on the seed (seed 1 found one until the
    draws changed with red teams 14 and 15's forms; none of seeds 0 to 14 does now)."""
    report = audited("gpt-oss-20b", "openai-harmony", "jinja", search=0)
    data = pair_data(report)
    assert data["engine"] == "openai-harmony" and data["trainer"] == "jinja"
    assert data["scenarios_compared"] >= 30 and data["scenarios_agree"] == 0
    assert data["scenarios_diverge"] == data["scenarios_compared"]
    assert {(d["in"], d["engine_token"], d["trainer_token"]) for d in data["first_divergences"]} == {
        ("prompt", " {\n", " object")
    }
    assert "tito-required:renderer_pair" in report.verdict_reasons
    # harmony writes each parallel call as a message closed by <|call|>: one call per turn, a form to avoid
    assert report.verdict == "tito-required" and "avoid:parallel_calls_per_turn" in report.verdict_reasons
    assert report.renderers["trainer"]["name"] == "jinja"
    ctx = AuditContext(load("gpt-oss-20b"), AuditOptions(renderer="openai-harmony", train_renderer="jinja", search=0))
    call = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"days": [1, 2]}}}
    messages = (
        {"role": "user", "content": "Weather for two days?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": "Sunny."},
        {"role": "assistant", "content": "Sunny both days."},
    )
    conversation = Conversation(messages, declarations(list(messages)), ())
    assert conversation.tools[0]["function"]["parameters"]["properties"]["days"] == {"type": "array"}
    ctx.add_simulations([play(ctx, conversation, "search/1").simulation])
    searched = run_check(PAIR, ctx).data
    firsts = {(d["scenario"], d["engine_token"], d["trainer_token"]) for d in searched["first_divergences"]}
    assert ("search/1", " Array", " any") in firsts


def test_pair_mistral_common_against_the_hf_template():
    report = audited("mistral-nemo-instruct-2407", "mistral-common", "jinja")
    data = pair_data(report)
    first = {d["scenario"]: d for d in data["first_divergences"]}
    # mistral-common JSON-quotes a tool result's content, the HF template writes it bare
    assert first["single_call/plain"]["turn"] == 2 and first["single_call/plain"]["in"] == "prompt"
    assert (first["single_call/plain"]["engine_token"], first["single_call/plain"]["trainer_token"]) == (' "', " Sunny")
    # a string of arguments: mistral-common parses it, the template writes the string
    assert first["single_call/args_string"]["in"] == "sampled"
    assert (
        data["scenarios_agree"] >= 1
        and data["scenarios_agree"] + data["scenarios_diverge"] == data["scenarios_compared"]
    )
    # what mistral-common refuses is listed, never counted as agreeing
    assert any("mistral-common" in why for why in data["not_compared"].values())


def test_pair_renderers_deepseek_v3_drifts_where_its_parity_suite_excludes_tools():
    """renderers' parity catalog excludes every tool scenario for DeepSeek-V3; here the template drops the call the
    engine rendered (content "" next to tool calls) and writes the end of sentence instead. Control-token text in the
    user's content is encoded as the control token on both sides (the audit renders as a plain apply_chat_template
    loop does, without marking: issue 40 class 2), so it departs nowhere first."""
    data = pair_data(audited("deepseek-v3", "renderers", "jinja"))
    assert data["scenarios_compared"] >= 30 and data["scenarios_agree"] == 0
    assert not any(forged_by_the_engine("deepseek-v3", d) for d in data["first_divergences"])
    assert {(d["engine_token"], d["trainer_token"]) for d in data["first_divergences"]} == {
        ("<｜tool▁calls▁begin｜>", "<｜end▁of▁sentence｜>")
    }


def test_pair_renderers_qwen3_against_the_hf_template():
    data = pair_data(audited("qwen3-0.6b", "renderers", "jinja"))
    assert data["scenarios_agree"] >= 30
    pair_only = [d for d in data["first_divergences"] if not d["engine_rerender_too"]]
    # reasoning inline in content: the template re-renders <think> with another newline than renderers does; empty
    # reasoning on a tool call with thinking off: renderers keeps its empty think block in the next prompt, the
    # template drops it (the derived reasoning_empty scenario); control-token text in content is encoded as control
    # tokens on both sides (the audit renders as a plain apply_chat_template loop does: issue 40 class 2), and the
    # sample's <think> is the one control token on both sides
    reasoning = {d["scenario"] for d in pair_only if d["scenario"].startswith(("inline_think/", "reasoning_empty/"))}
    forged = {d["scenario"] for d in pair_only if forged_by_the_engine("qwen3-0.6b", d)}
    assert any(s.startswith("reasoning_empty/") for s in reasoning) and not forged
    assert reasoning == {d["scenario"] for d in pair_only}


def test_pair_of_the_template_with_itself_only_finds_its_own_rewrites():
    data = pair_data(audited("qwen3-0.6b", "jinja", "jinja"))
    assert data["scenarios_agree"] >= 30
    assert all(d["engine_rerender_too"] for d in data["first_divergences"])
    assert data["scenarios_diverge_engine_too"] == data["scenarios_diverge"]


@needs_hub
def test_pair_renderers_llama_agrees_once_the_date_is_the_same():
    """renderers pins Llama 3's date_string; the template writes the audit's date unless given one."""
    dated = pair_data(audited("meta-llama/Llama-3.2-3B-Instruct", "renderers@llama-3", "jinja"))
    assert {(d["engine_token"], d["trainer_token"]) for d in dated["first_divergences"]} == {("26", "15")}
    data = pair_data(
        audited(
            "meta-llama/Llama-3.2-3B-Instruct",
            "renderers@llama-3",
            "jinja",
            template_kwargs={"date_string": "26 Jul 2024"},
        )
    )
    # control-token text in content: encoded alike on both sides since the audit renders plainly (issue 40 class 2)
    assert {d["scenario"].split("/")[1] for d in data["first_divergences"]} == {"args_string"}
    # renderers refuses parallel calls for Llama 3, as its parity suite excludes them
    assert data["not_compared"] and all("single tool call" in why for why in data["not_compared"].values())


def test_python_encoder_is_a_renderer(tmp_path):
    encoder = tmp_path / "chatml_encoder.py"
    encoder.write_text(
        textwrap.dedent(
            """
            def encode(messages, tools=None, add_generation_prompt=False):
                text = "".join(f"<|im_start|>{m['role']}\\n{m.get('content') or ''}<|im_end|>\\n" for m in messages)
                return text + ("<|im_start|>assistant\\n" if add_generation_prompt else "")
            """
        )
    )
    spec = f"{encoder}:encode"
    report = audited("qwen2.5-7b-instruct", spec, "jinja")
    assert report.renderers["engine"]["native"] == "text"
    assert report.error is None and report.scenarios["played"] >= 30
    data = pair_data(report)
    # the encoder writes no default system prompt and ignores the tools; Qwen2.5's template writes both
    assert data["scenarios_diverge"] == data["scenarios_compared"] >= 30
    for d in data["first_divergences"]:
        assert d["in"] == "prompt"
        assert d["trainer_text"].endswith("⟨system\nYou are Qwen, cre") or "⟨.\n\n# Tools" in d["trainer_text"]


def test_cli_names_a_bad_renderer_in_one_line():
    runner = CliRunner()
    result = runner.invoke(app, ["audit", "qwen3-0.6b", "--renderer", "nonsense"])
    assert result.exit_code == EXIT_OPERATIONAL
    assert "unknown renderer 'nonsense'" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["audit", "qwen3-0.6b", "--renderer", "renderers@no-such-family", "-q"])
    assert result.exit_code == EXIT_OPERATIONAL and "Traceback" not in result.output
    assert "renderers@no-such-family" in result.output


def test_pair_report_validates_against_the_schema(tmp_path):
    import jsonschema

    from tito_audit.report.model_report import AuditReport

    schema = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    doc = json.loads(json.dumps(AuditReport([audited("gpt-oss-20b", "openai-harmony", "jinja")]).to_dict()))
    jsonschema.validate(doc, schema)
    assert doc["models"][0]["options"]["train_renderer"] == "jinja"
    plain = AuditReport([audited("qwen3-0.6b", None)]).to_dict()
    assert "renderers" not in plain["models"][0] and "renderer" not in plain["models"][0]["options"]


def test_offline_line_is_shown_in_the_terminal_report(monkeypatch):
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    monkeypatch.setitem(os.environ, "COLUMNS", "200")
    result = CliRunner().invoke(app, ["audit", "gpt-oss-20b", "--renderer", "openai-harmony", "--thinking", "unset"])
    assert "engine renderer openai-harmony (openai-harmony" in result.output
    assert "engine renderer offline: openai-harmony downloads o200k_base.tiktoken" in result.output
