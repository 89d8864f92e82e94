"""The arms of a template read from the code jinja compiled it to, and the lines a render runs
(rendering/coverage.py)."""

from __future__ import annotations

import sys

from tito_audit import load
from tito_audit.rendering import Renderer
from tito_audit.rendering.analysis import compiled_template, template_code
from tito_audit.rendering.coverage import Recorder, TemplateBranches

TEMPLATE = """{%- macro show(m) %}{% if m.name is defined %}[{{ m.name }}]{% endif %}{% endmacro %}
{%- macro schema(t) %}{% if t.description %}{{ t.description }}{% endif %}{% endmacro %}
{%- for t in tools or [] %}{{ schema(t) }}{% endfor %}
{%- for message in messages %}
{%- if message.role == 'user' %}U: {{ message.content }}
{%- elif message.role == 'assistant' %}A: {{ show(message) }}{{ message.content | trim }}
{%- else %}{{ raise_exception('unknown role') }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}A:{% endif %}"""


def branches() -> TemplateBranches:
    compiled = compiled_template(TEMPLATE)
    return TemplateBranches(template_code(TEMPLATE), compiled.root_render_func, compiled.debug_info)


def test_arms_are_read_with_their_line_test_and_reach() -> None:
    arms = {(b.line, b.test): b for b in branches().branches}
    assert arms[(5, "(message.role == 'user')")].history
    assert arms[(6, "(message.role == 'assistant')")].history
    assert arms[(1, "m.name is defined")].history  # a macro called from the messages loop
    assert not arms[(2, "t.description")].history  # a macro called only for tool declarations
    assert arms[(7, "else of (message.role == 'user') / (message.role == 'assistant')")].raises
    assert not arms[(10, "add_generation_prompt")].history


def test_the_lines_a_render_runs_name_the_arms_it_did_not_take() -> None:
    model = load("qwen3-0.6b")
    renderer = Renderer(model.tokenizer, TEMPLATE)
    found = branches()
    recorder = Recorder(found.codes)
    with recorder:
        renderer.render([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert found.unexercised(recorder.ran) == []  # the elif's test never ran: nothing was decided there
    with recorder:
        renderer.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}])
    assert [b.test for b in found.unexercised(recorder.ran)] == ["m.name is defined"]
    with recorder:
        renderer.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "name": "n"}])
    assert found.unexercised(recorder.ran) == []


def test_nothing_is_recorded_under_another_tracer() -> None:
    recorder = Recorder(branches().codes)
    previous = sys.gettrace()
    sys.settrace(lambda *a: None)
    try:
        with recorder:
            pass
    finally:
        sys.settrace(previous)
    assert recorder.blocked and not recorder.ran
