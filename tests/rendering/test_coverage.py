"""The arms of a template read from the code jinja compiled it to, and which of them a render takes, counted by the
template's instrumented copy (rendering/coverage.py)."""

from __future__ import annotations

from dataclasses import replace

from tito_audit import load
from tito_audit.rendering.analysis import compiled_template, template_code
from tito_audit.rendering.coverage import PROBE, Recorder, TemplateBranches
from tito_audit.rendering.template_inputs import render_compiled, render_text

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
    return TemplateBranches(template_code(TEMPLATE), compiled_template(TEMPLATE).debug_info)


def test_arms_are_read_with_their_line_test_and_reach() -> None:
    arms = {(b.line, b.test): b for b in branches().branches}
    assert arms[(5, "(message.role == 'user')")].history
    assert arms[(6, "(message.role == 'assistant')")].history
    assert arms[(1, "m.name is defined")].history  # a macro called from the messages loop
    assert not arms[(2, "t.description")].history  # a macro called only for tool declarations
    assert arms[(7, "else of (message.role == 'user') / (message.role == 'assistant')")].raises
    assert not arms[(10, "add_generation_prompt")].history


def test_the_instrumented_copy_renders_the_same_text_and_counts_the_arms_taken() -> None:
    tokenizer = load("qwen3-0.6b").tokenizer
    found = branches()
    copy = found.instrumented(compiled_template(TEMPLATE))
    recorder = Recorder()

    def play(messages: list[dict[str, str]], agp: bool = False) -> None:
        ours = render_compiled(copy, tokenizer, messages, None, agp, {}, {PROBE: recorder.probe})
        assert ours == render_text(tokenizer, TEMPLATE, messages, None, agp, {})

    play([{"role": "user", "content": "hi"}], agp=True)
    # the messages' if was reached and its user arm taken; its assistant arm not yet (the macro's if not reached)
    assert [b.test for b in found.unexercised(recorder.ran)] == ["(message.role == 'assistant')"]
    play([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}])
    assert [b.test for b in found.unexercised(recorder.ran)] == ["m.name is defined"]
    play([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "name": "n"}])
    assert found.unexercised(recorder.ran) == []


def test_a_second_instrumented_copy_counts_the_same_arms() -> None:
    """The probes go into the tree the reading parsed; a second copy parses the code again and is the same."""
    tokenizer = load("qwen3-0.6b").tokenizer
    found = branches()
    compiled = compiled_template(TEMPLATE)
    copies = [found.instrumented(compiled), found.instrumented(compiled)]
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y", "name": "n"}]
    recorders = [Recorder(), Recorder()]
    texts = [
        render_compiled(c, tokenizer, messages, None, True, {}, {PROBE: r.probe})
        for c, r in zip(copies, recorders, strict=True)
    ]
    assert texts[0] == texts[1] == render_text(tokenizer, TEMPLATE, messages, None, True, {})
    assert recorders[0].ran == recorders[1].ran and recorders[0].ran


def test_a_probe_line_that_is_not_jinjas_pass_leaves_the_template_uninstrumented() -> None:
    """An arm whose first statement is not jinja's ``pass`` is code this reading does not know: no copy."""
    found = branches()
    arm = next(b for b in found.branches if b.body_line > 0)
    found.branches.append(replace(arm, body_line=arm.test_line))  # the ``if`` line itself: not a ``pass``
    assert found.instrumented(compiled_template(TEMPLATE)) is None


def test_arm_tests_read_back_as_template_syntax_not_compiled_code() -> None:
    """Tests with calls inside calls, a group inside a filter's argument, a method of an item, a negative index and
    a string holding a comma and a parenthesis read as the template writes them: no ``environment.call``,
    ``t_N(...)``, ``context`` or ``_loop_vars`` of jinja's compiled code (reasons quoted it before)."""
    template = (
        "{%- set tag = '</x>' %}{%- for message in messages %}"
        "{%- if (message.tool_calls|map('length')|list + [0])|max > 24 %}A{% endif %}"
        "{%- if message.get('functions', none) is none %}B{% endif %}"
        "{%- if messages[-1].role == 'tool' and message.content.endswith(tag) %}C{% endif %}"
        "{%- if message.content|replace('a, (b', '')|trim %}D{% endif %}"
        "{%- endfor %}"
    )
    tests = {b.test for b in TemplateBranches(template_code(template), compiled_template(template).debug_info).branches}
    assert tests >= {
        "((message.tool_calls|map('length')|list + [0])|max > 24)",
        "message.get('functions', None) is none",
        "((messages[-1].role == 'tool') and message.content.endswith(tag))",
        "message.content|replace('a, (b', '')|trim",
    }, tests
    assert not any(marker in t for t in tests for marker in ("environment", "context", "t_", "_loop_vars")), tests
