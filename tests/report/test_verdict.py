"""The verdict rule, pinned on constructed check results and on small hand-written templates.

The templates are ChatML (rendered with the shared Qwen2.5 tokenizer, whose control tokens they write); each one
differs from a well-behaved base in one way a real template does: it drops tool results, drops tool calls, drops
them only when content is "", needs string arguments, reads a flat tool-call shape, or strips think text from
every assistant turn. Each must be played on at least 30 scenarios and get the verdict the rule says.
"""

from __future__ import annotations

import copy

import pytest

from tests.conftest import invoke
from tito_audit.audit.checks import REGISTRY, CheckResult, Finding, verdict_inputs
from tito_audit.audit.context import AuditOptions
from tito_audit.audit.runner import audit_model
from tito_audit.gate import Suppression, apply_suppressions
from tito_audit.report.model_report import AuditReport
from tito_audit.report.verdict import MIN_COVERAGE, decide

TOKENIZER = "Qwen/Qwen2.5-7B-Instruct"


# --- decide() on constructed results ------------------------------------------------------------------------


def result(check_id: str, status: str = "pass", findings: list[Finding] | None = None) -> CheckResult:
    spec = REGISTRY[check_id]
    return CheckResult(
        spec.id,
        spec.title,
        status,  # type: ignore[arg-type]
        spec.severity,
        "",
        "",
        "",
        findings or [],
        comparisons=0 if status == "not_applicable" else 1,
        verdict_role=spec.verdict,
    )


def finding(check_id: str, reason: str | None = None, suppressed: bool = False) -> Finding:
    return Finding(check_id, "single_call/plain", "template", "x", reason=reason, suppressed=suppressed)


def clean() -> list[CheckResult]:
    checks = ("tool_support", "tool_forms", "tool_append_prefix", "naive_rerender", "history_rewrite", "time_of_day")
    return [result(cid) for cid in checks]


def with_result(checks: list[CheckResult], new: CheckResult) -> list[CheckResult]:
    return [new if c.id == new.id else c for c in checks]


def test_clean_results_are_safe() -> None:
    assert decide(clean()).verdict == "safe" and decide(clean()).reasons == []


@pytest.mark.parametrize("check_id", ["tool_support", "tool_append_prefix", "naive_rerender", "history_rewrite"])
@pytest.mark.parametrize("status", ["error", "not_applicable"])
def test_a_verdict_bearing_check_that_did_not_decide_makes_the_verdict_error(check_id: str, status: str) -> None:
    d = decide(with_result(clean(), result(check_id, status)))
    why = "check_error" if status == "error" else "compared_nothing"
    assert d.verdict == "error" and d.reasons == [f"error:{check_id}:{why}"]


def test_a_warning_check_that_errors_does_not_decide() -> None:
    checks = [*clean(), result("double_bos", "error"), result("loss_mask", "not_applicable")]
    assert decide(checks).verdict == "safe"


def test_a_filtered_out_verdict_check_is_not_run_and_the_verdict_says_so() -> None:
    checks = [c for c in clean() if c.id != "naive_rerender"]
    d = decide(checks)
    assert d.verdict == "error" and d.reasons == ["error:naive_rerender:not_run"]


def test_tool_support_failing_is_unsafe_with_what_is_dropped() -> None:
    failing = result("tool_support", "fail", [finding("tool_support", "drops_tool_results")])
    d = decide(with_result(clean(), failing))
    assert d.verdict == "unsafe" and d.reasons == ["unsafe:drops_tool_results"]


def test_proven_unsafe_stands_beside_a_check_error_that_is_listed() -> None:
    checks = with_result(clean(), result("tool_support", "fail", [finding("tool_support", "drops_tool_calls")]))
    checks = with_result(checks, result("naive_rerender", "error"))
    d = decide(checks)
    assert d.verdict == "unsafe" and d.reasons == ["unsafe:drops_tool_calls", "error:naive_rerender:check_error"]


def test_suppressed_unsafe_findings_still_need_the_buffer() -> None:
    suppressed = result("tool_append_prefix", "pass", [finding("tool_append_prefix", "rewrites_on_tool_append", True)])
    d = decide(with_result(clean(), suppressed))
    assert d.verdict == "tito-required" and d.reasons == ["tito-required:suppressed:rewrites_on_tool_append"]


def test_suppressed_rewrite_findings_never_make_a_template_safe() -> None:
    d = decide(with_result(clean(), result("naive_rerender", "pass", [finding("naive_rerender", None, True)])))
    # the verdict stays; the reason is read after suppressions (issue 33 item 5)
    assert d.verdict == "tito-required" and d.reasons == ["tito-required:suppressed:naive_rerender"]


def test_caveats_adaptations_and_low_coverage_are_reasons_that_keep_the_verdict() -> None:
    forms = result("tool_forms", "warn", [finding("tool_forms", "parallel_calls")])
    coverage = {"played": 12, "catalogue": 40, "adaptations": ["arguments_string"]}
    d = decide(with_result(clean(), forms), coverage)
    assert d.verdict == "safe"
    assert d.reasons == ["avoid:parallel_calls", "adapt:arguments_string", "low_coverage:12/40"]
    suppressed = result("tool_forms", "pass", [finding("tool_forms", "parallel_calls", True)])
    assert decide(with_result(clean(), suppressed)).reasons == []


# --- hand-written templates --------------------------------------------------------------------------------

_CALLS = """{%- for tc in m.tool_calls or [] %}{{- '<tool_call>' + tc.function.name + ' '
+ (tc.function.arguments | tojson) + '</tool_call>' }}{%- endfor %}"""


def chatml(
    calls: str = _CALLS,
    tool: str = "{{- '<|im_start|>tool\\n' + m.content + '<|im_end|>\\n' }}",
    content: str = "(m.content or '')",
) -> str:
    return (
        "{%- for m in messages %}"
        "{%- if m.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + "
        + content
        + " }}"
        + calls
        + "{{- '<|im_end|>\\n' }}"
        "{%- elif m.role == 'tool' %}"
        + tool
        + "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}"
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


TEMPLATES = {
    "base": chatml(),
    "drops_tool_results": chatml(tool=""),
    "drops_tool_calls": chatml(calls=""),
    # calls render unless content is "": the empty string alone drops them
    "drops_calls_when_empty": chatml(
        calls="{%- if m.content is not defined or m.content != '' %}" + _CALLS + "{%- endif %}"
    ),
    # calls render only without a content string: "" and text both drop them
    "drops_calls_with_content": chatml(calls="{%- if m.content is not string %}" + _CALLS + "{%- endif %}"),
    # arguments concatenated as a string: a dict raises TypeError
    "needs_string_arguments": chatml(
        calls="{%- for tc in m.tool_calls or [] %}{{- '<tool_call>' + tc.function.name + ' ' + tc.function.arguments"
        " + '</tool_call>' }}{%- endfor %}"
    ),
    # the flat shape: name and parameters on the call itself
    "needs_flat_calls": chatml(
        calls="{%- for tc in m.tool_calls or [] %}{{- '<tool_call>' + tc.name + ' ' + (tc.parameters | tojson)"
        " + '</tool_call>' }}{%- endfor %}"
    ),
    # think text stripped from every assistant turn, the last included; reasoning_content never read
    "strips_think": chatml(content="((m.content or '').split('</think>')[-1].lstrip('\\n'))"),
    # think text read inline only (reasoning_content never), kept on the last turn, stripped from history
    "inline_think_last_only": chatml(
        content="((m.content or '') if loop.last else (m.content or '').split('</think>')[-1].lstrip('\\n'))"
    ),
    # multimodal: content must be a list of text parts
    "needs_content_parts": chatml(content="(m.content | map(attribute='text') | join)")
    .replace("+ m.content +", "+ (m.content | map(attribute='text') | join) +")
    .replace(
        "{%- for m in messages %}",
        "{%- for m in messages %}{%- if m.content is string %}"
        "{{- raise_exception('content must be a list of parts') }}{%- endif %}",
        1,
    ),
    # reads messages[0] as the system prompt, with no default
    "needs_system_prompt": "{%- if messages[0]['role'] == 'system' %}"
    "{%- set sys = messages[0]['content'] %}{%- endif %}"
    "{{- '<|im_start|>system\\n' + sys + '<|im_end|>\\n' }}" + chatml(),
    # the tool role refused: results must come as user turns
    "rejects_tool_role": chatml(tool="{{- raise_exception('roles must alternate user/assistant') }}"),
}


@pytest.fixture(scope="module")
def audited(loaded):
    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            model = loaded(TOKENIZER).with_template(TEMPLATES[name], f"{name}.jinja")
            cache[name] = audit_model(model, AuditOptions())
        return cache[name]

    return get


EXPECTED = {
    # name: (verdict, reasons that must be there, adaptation used)
    "base": ("safe", [], None),
    "drops_tool_results": ("unsafe", ["unsafe:drops_tool_results"], None),
    "drops_tool_calls": ("unsafe", ["unsafe:drops_tool_calls"], None),
    "drops_calls_when_empty": ("safe", ["avoid:tool_calls_with_empty_content", "adapt:content_none"], "content_none"),
    "drops_calls_with_content": (
        "tito-required",
        ["avoid:tool_calls_with_empty_content", "avoid:tool_calls_with_content", "adapt:content_none"],
        "content_none",
    ),
    "needs_string_arguments": ("safe", ["adapt:arguments_string"], "arguments_string"),
    "needs_flat_calls": ("safe", ["adapt:flat_tool_calls"], "flat_tool_calls"),
    "strips_think": ("tito-required", ["tito-required:naive_rerender", "adapt:reasoning_emitted"], "reasoning_emitted"),
    "rejects_tool_role": ("safe", ["adapt:tool_as_user"], "tool_as_user"),
    "inline_think_last_only": (
        "unsafe",
        ["unsafe:rewrites_on_tool_append", "adapt:reasoning_inline"],
        "reasoning_inline",
    ),
    "needs_content_parts": ("safe", ["adapt:content_parts"], "content_parts"),
    "needs_system_prompt": ("safe", ["adapt:system_prompt"], "system_prompt"),
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_synthetic_template_verdict_and_coverage(audited, name: str) -> None:
    m = audited(name)
    verdict, reasons, adaptation = EXPECTED[name]
    assert m.error is None, m.error
    assert m.scenarios["played"] >= MIN_COVERAGE and not m.scenarios["low_coverage"], m.scenarios["not_applicable"]
    assert m.verdict == verdict, (m.verdict, m.verdict_reasons)
    assert all(r in m.verdict_reasons for r in reasons), m.verdict_reasons
    if adaptation is not None:
        assert adaptation in m.scenarios["adaptations"]
    # never safe or tito-required while an error-level check fails or a verdict-bearing check did not decide
    if m.verdict in ("safe", "tito-required"):
        assert all(c.status != "fail" for c in m.checks if c.severity == "error")
        assert all(
            c.status not in ("error", "not_applicable")
            for c in m.checks
            if c.verdict_role in ("unsafe", "tito-required")
        )
    # no check passes having compared nothing
    assert all(c.comparisons > 0 for c in m.checks if c.status == "pass")


def test_the_drop_names_the_form_to_avoid_on_the_verdict_line(audited) -> None:
    from tito_audit.formats.labels import verdict_reasons_text

    text = verdict_reasons_text(audited("drops_calls_when_empty"))
    assert 'avoid tool calls next to content ""' in text and "needs content None" in text


def test_filtering_checks_never_changes_the_verdict(loaded) -> None:
    model = loaded(TOKENIZER).with_template(TEMPLATES["drops_tool_results"], "drops_tool_results.jinja")
    full = audit_model(model, AuditOptions())
    only = audit_model(model, AuditOptions(only_checks=("roundtrip",)))
    assert {c.id for c in only.checks} == {"roundtrip"} | {s.id for s in REGISTRY.values() if s.verdict_bearing}
    assert (only.verdict, only.verdict_reasons) == (full.verdict, full.verdict_reasons)


def test_suppressing_the_drop_keeps_the_buffer_verdict(audited) -> None:
    report = AuditReport([copy.deepcopy(audited("drops_tool_results"))])
    apply_suppressions(report, [Suppression(check="tool_support", reason="we never re-render tool results")], None)
    m = report.models[0]
    assert m.check("tool_support").status == "pass"
    assert m.verdict == "tito-required" and "tito-required:suppressed:drops_tool_results" in m.verdict_reasons


# --- the gate -------------------------------------------------------------------------------------------------


def _cli(args: list[str]):
    return invoke("audit", "qwen2.5-7b-instruct", "--jobs", "1", "-q", *args)


def test_a_check_error_exits_3_unless_allowed(monkeypatch) -> None:
    from dataclasses import replace

    def boom(ctx):
        raise ZeroDivisionError("check bug for the test")

    monkeypatch.setitem(REGISTRY, "double_bos", replace(REGISTRY["double_bos"], run=boom))
    res = _cli([])
    assert res.exit_code == 3, res.output
    assert "check double_bos could not run: ZeroDivisionError" in res.stderr
    assert _cli(["--allow-check-errors"]).exit_code == 0


def test_an_undecided_verdict_never_exits_0(monkeypatch) -> None:
    """A verdict-bearing check that compares nothing makes the verdict ``error``: the gate must not go green, not
    even with ``--allow-check-errors`` (the check did not error, it decided nothing)."""
    from dataclasses import replace

    from tito_audit.report.findings import Outcome

    monkeypatch.setitem(
        REGISTRY, "tool_append_prefix", replace(REGISTRY["tool_append_prefix"], run=lambda ctx: Outcome())
    )
    for extra in ([], ["--allow-check-errors"]):
        res = _cli(extra)
        assert res.exit_code == 3, res.output
        assert "verdict undecided (tool_append_prefix compared nothing)" in res.stderr


def test_min_coverage_gates_on_scenarios_played(report) -> None:
    assert _cli(["--min-coverage", "30"]).exit_code == 0
    from typer.testing import CliRunner

    from tito_audit.cli import app

    scenarios = report("mistral-nemo-instruct-2407").scenarios  # a template that rejects some scenarios
    played, catalogue = scenarios["played"], scenarios["catalogue"]
    assert played < catalogue
    argv = ["audit", "mistral-nemo-instruct-2407", "--jobs", "1", "-q", "--min-coverage", str(catalogue)]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 3 and f"{played} of {catalogue} scenarios played, fewer than --min-coverage" in res.stderr
    unreachable = _cli(["--min-coverage", "1000"])  # above the whole catalogue: no template could pass it
    assert unreachable.exit_code == 2 and "--min-coverage 1000 is unreachable: its catalogue has" in unreachable.stderr


# --- the real Qwen2.5 template, with its tool traffic cut out --------------------------------------------------


def _qwen25_without(loaded, cut: str) -> object:
    import re

    template = loaded(TOKENIZER).chat_template
    if cut == "tool_role":  # the tool branch never taken: tool messages render nothing
        patched = template.replace('{%- elif message.role == "tool" %}', "{%- elif false %}")
    elif cut == "tool_results":  # the branch taken, the result text left out
        patched = template.replace(
            "{{- message.content }}\n        {{- '\\n</tool_response>' }}", "{{- '\\n</tool_response>' }}"
        )
    else:  # the tool_calls loop removed
        patched = re.sub(r"\{%- for tool_call in message\.tool_calls %\}.*?\{%- endfor %\}", "", template, flags=re.S)
    assert patched != template
    return audit_model(loaded(TOKENIZER).with_template(patched, f"qwen25-without-{cut}.jinja"), AuditOptions())


@pytest.mark.parametrize(
    ("cut", "reason"),
    [("tool_role", "drops_tool_results"), ("tool_results", "drops_tool_results"), ("tool_calls", "drops_tool_calls")],
)
def test_qwen25_without_its_tool_traffic_is_unsafe(loaded, cut: str, reason: str) -> None:
    m = _qwen25_without(loaded, cut)
    assert m.verdict == "unsafe" and f"unsafe:{reason}" in m.verdict_reasons, m.verdict_reasons
    assert m.scenarios["played"] >= MIN_COVERAGE


def test_special_token_injection_never_compares_plain_with_plain(loaded, monkeypatch) -> None:
    """When the sanitized render fails, the check counts the failure and compares nothing (it used to fall back to
    the plain encoding and compare it with itself: "content text stays text")."""
    from tito_audit.audit.checks.base import run_check
    from tito_audit.audit.context import AuditContext
    from tito_audit.errors import RenderError
    from tito_audit.rendering.renderer import Renderer

    def refuse(self, *args, **kwargs):
        raise RenderError("type", "TypeError: cannot sanitize")

    ctx = AuditContext(loaded(TOKENIZER), AuditOptions())
    assert run_check(REGISTRY["special_token_injection"], ctx).comparisons > 0
    monkeypatch.setattr(Renderer, "sanitized_ids", refuse)
    r = run_check(REGISTRY["special_token_injection"], ctx)
    assert r.status == "not_applicable" and r.comparisons == 0 and r.render_failures > 0
    assert "cannot sanitize" in r.summary


@pytest.mark.parametrize(
    ("check_id", "method"),
    [("history_rewrite", "render_ids"), ("time_invariance", "render_ids"), ("loss_mask", "render_with_mask")],
)
def test_a_check_whose_renders_fail_does_not_pass(loaded, monkeypatch, check_id: str, method: str) -> None:
    """These checks used to ``continue`` past a failed render and then pass having compared nothing."""
    from tito_audit.audit.checks.base import run_check
    from tito_audit.audit.context import AuditContext
    from tito_audit.errors import RenderError
    from tito_audit.rendering.renderer import Renderer

    def refuse(self, *args, **kwargs):
        raise RenderError("raised", "refused for the test")

    # a template with generation markers, so that loss_mask reaches its renders
    marked = TEMPLATES["base"].replace(
        "{{- '<|im_end|>\\n' }}{%- elif", "{% generation %}{{- '<|im_end|>\\n' }}{% endgeneration %}{%- elif", 1
    )
    ctx = AuditContext(loaded(TOKENIZER).with_template(marked, "marked.jinja"), AuditOptions())
    assert ctx.ok_simulations()  # played before the renderer is broken
    monkeypatch.setattr(Renderer, method, refuse)
    r = run_check(REGISTRY[check_id], ctx)
    assert r.status == "not_applicable" and r.comparisons == 0 and r.render_failures > 0, (r.status, r.summary)


def test_every_format_shows_coverage_and_says_when_it_is_low(audited) -> None:
    import json

    from tito_audit.formats import render_report

    m = copy.deepcopy(audited("needs_string_arguments"))
    m.scenarios.update(played=12, low_coverage=True)  # as if most scenarios had been refused
    m.decide()
    low = f"12/{m.scenarios['catalogue']}"
    assert m.verdict == "safe" and f"low_coverage:{low}" in m.verdict_reasons
    report = AuditReport([m])
    for fmt in ("terminal", "markdown", "html", "sarif"):
        text = render_report(report, fmt)
        assert f"{low} scenarios played" in text and "arguments_string" in text, fmt
        assert "fewer than 30" in text, fmt
    doc = json.loads(render_report(report, "json"))["models"][0]
    assert doc["scenarios"]["low_coverage"] is True and f"low_coverage:{low}" in doc["verdict_reasons"]
    assert f"only 12 of {m.scenarios['catalogue']} scenarios played" in render_report(report, "terminal", quiet=True)


def test_the_public_api_names_the_types_it_returns(audited) -> None:
    """``from tito_audit import ...`` gives the types of what ``audit_model`` returns, the verdict a ``Literal``."""
    import typing

    import tito_audit
    from tito_audit.report.model_report import ModelReport
    from tito_audit.report.verdict import VERDICTS

    assert set(typing.get_args(tito_audit.Verdict)) == set(VERDICTS)
    assert typing.get_type_hints(ModelReport)["verdict"] == tito_audit.Verdict
    report = audited("drops_tool_results")
    assert report.verdict in typing.get_args(tito_audit.Verdict)
    assert all(isinstance(c, tito_audit.CheckResult) for c in report.checks)
    findings = [f for c in report.checks for f in c.findings]
    assert findings and all(isinstance(f, tito_audit.Finding) for f in findings)
    assert any(isinstance(f.expected, tito_audit.TokenSide) for f in findings)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_the_checks_the_verdict_reads_decide_it_alone(audited, name: str) -> None:
    """What lets the corpus scan skip the other checks: their results never move the verdict or its reasons."""
    m = audited(name)
    alone = decide([c for c in m.checks if c.id in verdict_inputs()], m.scenarios)
    assert (alone.verdict, alone.reasons) == (m.verdict, m.verdict_reasons)
    others = [c for c in m.checks if c.id not in verdict_inputs()]
    assert others and all(c.verdict_role is None and c.severity == "warning" for c in others)


# --- the verdict in words ------------------------------------------------------------------------------------


def test_an_unsafe_headline_says_which_cause_holds(report) -> None:
    """ "drops tool traffic or breaks buffer + delta" told a reader nothing: each real model's headline names the
    cause its reasons prove, and only that one."""
    breaks, drops = report("qwen3-0.6b"), report("deepseek-v3")
    assert breaks.verdict == drops.verdict == "unsafe"
    assert breaks.verdict_explanation == "the template breaks buffer + delta: it must be patched"
    assert drops.verdict_explanation == "the template drops tool traffic: it must be patched"
    both = copy.copy(drops)
    both.verdict_reasons = [*drops.verdict_reasons, "unsafe:rewrites_on_tool_append"]
    assert both.verdict_explanation.startswith("the template drops tool traffic and breaks buffer + delta")
    assert all(" or " not in m.verdict_explanation for m in (breaks, drops, both))


def test_coverage_and_adaptation_reasons_explain_themselves() -> None:
    from tito_audit.report.verdict import describe_reason

    whole = describe_reason("low_coverage:16/16")
    assert whole.startswith("16 scenarios played, all the template allows") and "16/16" not in whole
    assert describe_reason("low_coverage:12/40").startswith("only 12 of 40 scenarios played")
    empty = describe_reason("adapt:content_empty")
    assert "raises on content None" in empty and 'send ""' in empty
    assert "drops the calls" in describe_reason("adapt:content_none")


def test_each_not_probed_kind_is_described_as_itself() -> None:
    """An unmeasured coverage is not described as reasoning (the last branch once took every kind it did not know)."""
    from tito_audit.report.verdict import describe_reason

    renderer = describe_reason("not_probed:coverage:renderer")
    assert renderer.startswith("which template lines ran was not measured") and "Jinja" in renderer
    assert "reasoning" not in renderer
    closer = describe_reason("not_probed:reasoning:</think>")
    assert closer == "reasoning not probed (</think>: the probe does not render)"
    assert "tool-call turns" in describe_reason("not_probed:reasoning:tool_calls")
    assert describe_reason("not_probed:something_new:x") == "something_new:x not probed"


def test_every_search_gap_reads_as_itself() -> None:
    """Each ``not_probed:search:...`` reason in its own words (on de5514b ``search:unjudged:agent`` read "the
    counterexample search drew unjudged:agent of  conversations", as a budget stop)."""
    from tito_audit.report.verdict import describe_reason

    assert describe_reason("not_probed:search:12/40").startswith("the counterexample search drew 12 of 40")
    assert "failed" in describe_reason("not_probed:search:failed")
    unjudged = describe_reason("not_probed:search:unjudged:agent")
    assert unjudged.startswith("the search's sweep of agent") and "judged" in unjudged and "drew" not in unjudged
    refused = describe_reason("not_probed:search:refused:texts")
    assert refused.startswith("the search's sweep of texts") and "tried nowhere" in refused and "drew" not in refused
