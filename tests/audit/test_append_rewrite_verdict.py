"""Red team 51: a TITO-REQUIRED verdict said "buffer + delta is exact" on templates whose history a loop's append of
a user or system message rewrites, where ``Trajectory`` refuses that append: stock Mistral-Nemo (the tool list moves
in front of the last user message: token 1 is ``[AVAILABLE_TOOLS]`` where the buffer holds ``[INST]``) and a template
that cuts earlier tool results to 40 characters once a later user turn exists. ``history_rewrite`` now names such a
rewrite ``rewrites_on_append`` and the verdict says buffer + delta is exact on tool appends only.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tests.conftest import audit_of
from tito_audit import load
from tito_audit.report.verdict import TITO_REQUIRED_ON_TOOL_APPENDS, VERDICTS
from tito_audit.rollout import Trajectory
from tito_audit.rollout.bridge import BridgeError

QWEN = "Qwen/Qwen2.5-7B-Instruct"
REASON = "tito-required:rewrites_on_append"


@pytest.fixture(scope="module")
def cut_results(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """Qwen2.5's template, writing every tool result before the last user message cut to 40 characters."""
    template = load(QWEN).chat_template
    last_user = (
        "{%- set cut = namespace(last=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
        "{%- set cut.last = loop.index0 %}{%- endif %}{%- endfor %}"
    )
    whole = "{{- message.content }}\n        {{- '\\n</tool_response>' }}"
    assert whole in template
    cut = (
        "{%- if loop.index0 < cut.last %}{{- message.content[:40] }}{%- else %}{{- message.content }}{%- endif %}"
        "\n        {{- '\\n</tool_response>' }}"
    )
    path = tmp_path_factory.mktemp("rt51") / "cut_results.jinja"
    path.write_text(last_user + template.replace(whole, cut), encoding="utf-8")
    return path


def test_the_buffer_refuses_the_user_append_that_the_verdict_names(cut_results):
    """What the verdict says, shown with the buffer itself: a result longer than 40 characters, an answer, then a
    user turn: the append is refused."""
    m = load(QWEN, chat_template_file=str(cut_results))
    traj = Trajectory.from_model(m)

    def sample(message):  # type: ignore[no-untyped-def]
        ids = traj.renderer.render_ids([*traj.messages, message])[len(traj.input_ids) :]
        stop = next(k for k, i in enumerate(ids) if i in traj.stop_ids)
        traj.append_sampled(ids[: stop + 1], message=message)

    call = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    traj.start([{"role": "user", "content": "Weather in Oslo?"}])
    sample({"role": "assistant", "content": "", "tool_calls": [call]})
    result = "Cold and windy in Oslo today: 3 C, rain all day, gusts to 60 km/h."  # longer than 40 characters
    traj.append_messages([{"role": "tool", "tool_call_id": "call00001", "content": result}])
    sample({"role": "assistant", "content": "It is cold."})
    with pytest.raises(BridgeError):
        traj.append_messages([{"role": "user", "content": "And tomorrow?"}])


@pytest.mark.parametrize("which", ["cut_results", "mistral-nemo-instruct-2407"])
def test_a_history_a_user_append_rewrites_is_not_called_exact(which, cut_results):
    r = audit_of(QWEN, cut_results) if which == "cut_results" else audit_of(which)
    assert r.verdict == "tito-required", r.verdict_reasons
    assert REASON in r.verdict_reasons
    assert r.verdict_explanation == TITO_REQUIRED_ON_TOOL_APPENDS != VERDICTS["tito-required"]
    assert "exact on tool appends" in r.verdict_explanation
    findings = [f for f in r.check("history_rewrite").findings if f.reason == "rewrites_on_append"]
    assert findings, [f.message for f in r.check("history_rewrite").findings]


@pytest.mark.parametrize("model", [QWEN, "meta-llama/Llama-3.2-3B-Instruct"])
def test_templates_whose_appends_all_keep_the_prefix_are_not_named(model):
    r = audit_of(model)
    assert r.verdict == "safe" and REASON not in r.verdict_reasons
    assert r.verdict_explanation == VERDICTS["safe"]


def test_a_suppressed_append_rewrite_keeps_the_qualified_words():
    """Red team 53: a suppression accepts the rewrite, the template still makes it: the verdict still says buffer +
    delta is exact on tool appends only."""
    from tito_audit.gate import Suppression, apply_suppressions
    from tito_audit.report.model_report import AuditReport

    report = AuditReport([copy.deepcopy(audit_of("mistral-nemo-instruct-2407"))])
    apply_suppressions(report, [Suppression("history_rewrite", "accepted: we start a sequence per user turn")], None)
    (r,) = report.models
    assert "tito-required:suppressed:rewrites_on_append" in r.verdict_reasons and REASON not in r.verdict_reasons
    assert r.verdict == "tito-required" and r.verdict_explanation == TITO_REQUIRED_ON_TOOL_APPENDS
