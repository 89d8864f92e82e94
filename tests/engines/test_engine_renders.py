"""Wrong greens under ``--renderer``/``--train-renderer`` that a red team found, each held to what the engine really
does. The encoders (``tests/data/encoders/red_team.py``) render with Qwen2.5's own template and break it one way."""

from __future__ import annotations

import copy
import datetime as dt
import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tests.conftest import DATA, audit_of
from tito_audit import load
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.cli import app
from tito_audit.engines.resolve import engine_for
from tito_audit.rendering.guard import AUDIT_LIMITS
from tito_audit.rollout.probes import TOOLS
from tito_audit.scenarios import build_scenarios

ENCODERS = DATA / "encoders" / "red_team.py"
MODEL = "qwen2.5-7b-instruct"


def enc(name: str) -> str:
    return f"{ENCODERS}:{name}"


def audited(renderer: str | None, trainer: str | None = None, **kwargs: object):
    return audit_of(MODEL, renderer=renderer, train_renderer=trainer, **kwargs)


def forged_im_ends(ids: list[int]) -> int:
    return ids.count(load(MODEL).tokenizer.convert_tokens_to_ids("<|im_end|>"))


# 1. special_token_injection compares what the engine feeds the model with the safe encoding


@pytest.mark.parametrize("encoder", ["good", "good_ids"])
def test_an_engine_that_encodes_content_control_text_as_control_tokens_is_caught(encoder):
    """The encoder's render is encoded plainly (text) or returned so (ids): `<|im_end|>` in user and tool content
    becomes the control token. The check compared the engine with itself before."""
    report = audited(enc(encoder), scenarios="quick")
    check = report.check("special_token_injection")
    assert check.status == "warn" and check.findings
    assert "<|im_end|>" in check.findings[0].message and "forged control token" in check.findings[0].message
    ctx = AuditContext(load(MODEL), AuditOptions(renderer=enc(encoder), scenarios="quick"))
    sim = next(s for s in ctx.ok_simulations() if "special_text" in s.scenario.tags)
    tools = list(sim.scenario.tools)
    fed = ctx.renderer.encode(ctx.renderer.render(sim.messages, tools=tools))
    safe = ctx.renderer.sanitized_ids(sim.messages, tools=tools)
    in_content = sum(str(m.get("content")).count("<|im_end|>") for m in sim.messages)
    assert in_content >= 2 and forged_im_ends(fed) - forged_im_ends(safe) == in_content
    assert ctx.renderer.render_ids(sim.messages, tools=tools) == fed  # the buffer holds what the engine feeds


def test_an_engine_that_keeps_content_control_text_as_text_passes():
    check = audited(enc("escaping"), scenarios="quick").check("special_token_injection")
    assert check.status == "pass" and check.comparisons >= 1


# 2. time_invariance: every engine renders at the pinned date, with its wall clock stopped there


def test_an_encoder_reading_the_wall_clock_is_caught():
    check = audited(enc("today"), scenarios="quick").check("time_invariance")
    assert check.status == "warn" and check.findings and check.findings[0].cls == "date"


def test_an_encoder_is_given_the_pinned_date_and_sees_it_on_the_clock():
    model = load(MODEL)
    for name in ("dated", "today"):
        ctx = AuditContext(model, AuditOptions(renderer=enc(name), date=dt.datetime(2031, 3, 4, 9, 0)))
        assert "Today Date: 04 Mar 2031" in ctx.renderer.render([{"role": "user", "content": "Hi"}])


def test_without_a_stoppable_clock_an_engine_that_agrees_is_not_checked(monkeypatch):
    monkeypatch.setattr("tito_audit.engines.wall_clock.available", lambda: False)
    ctx = AuditContext(load(MODEL), AuditOptions(renderer=enc("good"), scenarios="quick"))
    from tito_audit.audit.checks import REGISTRY, run_check

    result = run_check(REGISTRY["time_invariance"], ctx)
    assert result.status == "not_applicable" and "not checked" in (result.summary or "")


# 3. an engine that edits its inputs in place cannot change the audit's scenarios


def test_an_engine_editing_its_inputs_in_place_changes_no_scenario():
    before = copy.deepcopy((TOOLS, [s.messages for s in build_scenarios()]))
    report = audited(enc("strip_tool_docs_inplace"), "jinja")
    audited(enc("args_string_inplace"), scenarios="quick")
    assert copy.deepcopy((TOOLS, [s.messages for s in build_scenarios()])) == before
    assert all("description" in t["function"] for t in TOOLS)
    # the same encoder on a copy of its inputs: the same verdict, the same divergences
    copied = audited(enc("strip_tool_docs_copy"), "jinja")
    assert report.verdict == copied.verdict == "tito-required"
    assert (
        report.check("renderer_pair").data["scenarios_diverge"]
        == copied.check("renderer_pair").data["scenarios_diverge"]
    )


# 4-5. pairs compare every scenario or say why not; a pair that compared nothing is undecided (exit 3)


def test_pair_compares_control_token_text_scenarios():
    report = audited(None, enc("escaping_trainer"))
    data = report.check("renderer_pair").data
    special = {d["scenario"] for d in data["first_divergences"] if d["scenario"].endswith("/special_text")}
    assert len(special) == 3 and report.verdict == "tito-required"
    assert data["scenarios_compared"] + len(data["not_compared"]) == report.scenarios["catalogue"]


def test_pair_that_compares_nothing_exits_3():
    result = CliRunner().invoke(app, ["audit", MODEL, "--train-renderer", enc("refuse_tools"), "--quiet"])
    assert result.exit_code == 3, result.output
    assert "ERROR" in result.output and "renderer_pair compared nothing" in result.output


# 6-8. reasoning switches of engines: **kwargs, string-valued modes, a switch named `thinking`


def test_kwargs_encoder_switches_are_probed_and_named_not_all_probed():
    report = audited(enc("thinking_kwargs"), scenarios="quick")
    assert {"enable_thinking": True} in report.scenarios["thinking_modes"]
    assert report.verdict == "tito-required" and "not_probed:thinking_modes" in report.verdict_reasons
    assert any("**kwargs" in note for note in report.renderers["engine"]["notes"])


def test_an_option_no_renderer_takes_is_refused_in_one_line():
    result = CliRunner().invoke(
        app, ["audit", MODEL, "--renderer", enc("thinking_kwargs"), "-k", "enable_thinkng=true", "--quiet"]
    )
    assert result.exit_code == 2 and "no renderer takes option enable_thinkng" in result.output
    assert "Traceback" not in result.output


def test_string_valued_thinking_mode_is_probed():
    # a Python encoder renders slowly: with the default 3 s of template CPU, the search's as much again ran out after
    # 20 to 38 of its 40 draws on a loaded machine (named ``search:N/40``, as it must be); this test is about the
    # thinking modes and what is named, so the budget is not what it measures
    report = audited(enc("ds_style"), scenarios="quick", limits=replace(AUDIT_LIMITS, template_cpu_seconds=60.0))
    assert {"thinking_mode": "thinking"} in report.scenarios["thinking_modes"]
    # the switch's values were enumerated: thinking modes are covered. The encoder (Qwen2.5's template) never writes
    # reasoning, and a renderer without template source cannot say it reads none: that is named, never a pass; nor
    # can it say which of its lines ran (no Jinja template to instrument)
    assert report.verdict == "tito-required"
    assert report.scenarios.get("not_probed") == ["field:reasoning_content", "coverage:renderer"]
    assert "coverage" not in report.scenarios and report.scenarios["search"]["drawn"] == 40


def test_a_boolean_switch_named_thinking_is_probed():
    assert {"thinking": True} in audited(enc("thinking_bool"), scenarios="quick").scenarios["thinking_modes"]
    # the template path reads the same name: a template whose switch is `thinking`
    template = (DATA / "templates" / "thinking_switch.jinja").read_text()
    ctx = AuditContext(load(MODEL).with_template(template, "thinking_switch.jinja"), AuditOptions())
    assert ctx.thinking_switches == {"thinking": (True, False)}


def test_harmony_reasoning_effort_values_are_probed(monkeypatch):
    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    ctx = AuditContext(load("gpt-oss-20b"), AuditOptions(renderer="openai-harmony"))
    assert ctx.thinking_switches == {"reasoning_effort": ("low", "high")}  # medium is harmony's default
    assert {"reasoning_effort": "high"} in ctx.thinking_modes


# 9. three tool results and more


def test_an_engine_trimming_older_tool_results_is_caught():
    assert any(sum(m["role"] == "tool" for m in s.messages) >= 3 and "parallel" in s.tags for s in build_scenarios())
    report = audited(enc("trim_old_tool_results"))
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons


# 10-11. what the report says about the engine


def test_an_ids_encoder_is_reported_as_rendering_ids():
    assert audited(enc("good_ids"), scenarios="quick").renderers["engine"]["native"] == "ids"


def test_a_renderer_that_refuses_everything_is_named():
    report = audited(enc("refuse_all"), scenarios="quick")
    assert report.verdict == "error" and f"renderer {enc('refuse_all')} fails for every conversation" in report.error


def test_harmony_checks_the_decode_of_every_render(monkeypatch):
    from tito_audit.engines.base import RendererRefused

    monkeypatch.delenv("TIKTOKEN_ENCODINGS_BASE", raising=False)
    engine = engine_for("openai-harmony", load("gpt-oss-20b"))

    class Lying:  # harmony's encoding, decoding its ids to another text than the model's tokenizer does
        def __getattr__(self, name):
            return getattr(real, name)

        def decode_utf8(self, ids):
            return "not what the tokenizer decodes"

    real = engine._encoding
    engine.render([{"role": "user", "content": "Hi"}], None, True, {}, dt.datetime(2026, 1, 15))
    monkeypatch.setattr(engine, "_encoding", Lying())
    with pytest.raises(RendererRefused, match="decode differently"):
        engine.render([{"role": "user", "content": "Hi"}], None, True, {}, dt.datetime(2026, 1, 15))


def test_provenance_names_the_renderer_not_an_empty_template():
    report = audited(enc("good"), scenarios="quick")
    p = report.provenance
    assert p.template_sha256 is None
    assert "python encoder" in p.template_file and "source sha256" in p.template_file


def test_an_option_only_one_side_takes_goes_to_that_side_and_is_said():
    report = audited(enc("good"), "jinja", template_kwargs={"date_string": "26 Jul 2024"}, scenarios="quick")
    assert report.verdict != "error" and report.scenarios["played"] >= 10
    assert any("date_string" in note for note in report.renderers["engine"]["notes"])


def test_a_renderer_safe_names_its_unmeasured_template_lines_and_exits_3(tmp_path):
    """A renderer that is not a Jinja template has no lines to instrument: which ran is named as not measured, so
    its SAFE is not a clean one (exit 3 unless --allow-not-probed)."""
    result = CliRunner().invoke(app, ["audit", MODEL, "--renderer", enc("good"), "--format", "json"])
    model = json.loads(result.stdout)["models"][0]
    assert model["verdict"] == "safe" and "not_probed:coverage:renderer" in model["verdict_reasons"]
    assert result.exit_code == 3
