"""Renders with each input prepared once (``rendering.template_inputs``) are transformers' own renders."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import CORPUS, needs_corpus
from tito_audit.rendering import RenderLimits, template_inputs
from tito_audit.rendering.guard import render_limits
from tito_audit.rendering.template_inputs import render_text

CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "reasoning_content": "Look it up.", "tool_calls": [CALL]},
    {"role": "tool", "name": "get_weather", "tool_call_id": "0", "content": "Sunny, 21 C."},
    {"role": "assistant", "content": "Sunny.", "thinking": "Say it."},
    {"role": "user", "content": [{"type": "text", "text": "And Rome?"}]},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _outcome(render, *args, **kwargs) -> tuple[str, str]:
    """A render's text, or the type and message of what it raised (bounded: corpus templates are untrusted)."""
    try:
        with render_limits(RenderLimits()):
            return "text", render(*args, **kwargs)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _reference(tok, template, messages, tools=None, agp=False, **kwargs) -> tuple[str, str]:
    return _outcome(
        tok.apply_chat_template,
        messages,
        tools=tools,
        chat_template=template,
        add_generation_prompt=agp,
        tokenize=False,
        **kwargs,
    )


def _fast(tok, template, messages, tools=None, agp=False, **kwargs) -> tuple[str, str]:
    return _outcome(render_text, tok, template, messages, tools, agp, kwargs)


@needs_corpus
def test_renders_equal_apply_chat_template_on_a_fourth_of_the_corpus(loaded) -> None:
    """Every prefix of a tool conversation with reasoning under three field names, a None content and content
    parts, with and without a generation prompt and a template kwarg, on two tokenizer classes: the same text as
    ``apply_chat_template``, or the same exception with the same message. Twice over, so that the second round
    renders from the memo."""
    from tito_audit.rendering.analysis import compiled_template

    tokenizers = [loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer, loaded("meta-llama/Llama-3.2-3B-Instruct").tokenizer]
    assert len({type(t) for t in tokenizers}) == 2
    texts = errors = 0
    for n, path in enumerate(sorted(CORPUS.glob("*.jinja"))[::4]):
        template = path.read_text(encoding="utf-8")
        try:
            compiled_template(template)
        except Exception:
            continue
        tok = tokenizers[n % 2]
        for _round in range(2):
            for end in range(1, len(CONVERSATION) + 1):
                for agp, kwargs in ((False, {}), (True, {"enable_thinking": False})):
                    args = (tok, template, CONVERSATION[:end], TOOLS, agp)
                    ours, theirs = _fast(*args, **kwargs), _reference(*args, **kwargs)
                    assert ours == theirs, (path.name, end, agp)
                    texts += ours[0] == "text"
                    errors += ours[0] != "text"
    assert texts > 3000 and errors > 100


def test_equal_messages_of_one_conversation_stay_two_objects(loaded) -> None:
    tok = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    template = "{{ messages[0] is sameas messages[1] }}|{{ messages[0] == messages[1] }}"
    twice = [{"role": "user", "content": "hi"}, {"role": "user", "content": "hi"}]
    assert _fast(tok, template, twice) == _reference(tok, template, twice) == ("text", "False|True")


def test_a_template_cannot_change_a_prepared_message(loaded) -> None:
    """The immutable sandbox refuses the change, and later renders see the message as it was."""
    from tito_audit.rendering.analysis import prepare_for_renders

    tok = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    messages = [{"role": "user", "content": "hi", "tool_calls": [CALL]}]
    for change in ("messages[0].update({'content': 'changed'})", "messages[0].tool_calls.append(1)"):
        template = "{{ " + change + " }}"
        prepare_for_renders(template)
        kind, message = _fast(tok, template, messages)
        assert kind == "SecurityError" and (kind, message) == _reference(tok, template, messages)
    shown = "{{ messages[0].content }}|{{ messages[0].tool_calls | length }}"
    assert _fast(tok, shown, messages) == ("text", "hi|1")


def test_kwargs_transformers_reads_as_its_own_arguments_go_to_apply_chat_template(loaded) -> None:
    tok = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    template = "{{ documents | tojson }}|{{ messages | length }}"
    documents = [{"title": "t", "text": "x"}]
    messages = [{"role": "user", "content": "hi"}]
    assert _fast(tok, template, messages, documents=documents) == _reference(
        tok, template, messages, documents=documents
    )
    assert _fast(tok, template, messages, documents=documents)[1].startswith('[{"title"')


def test_a_transformers_that_passes_templates_other_arguments_is_not_followed(loaded, monkeypatch) -> None:
    """A transformers that hands templates one more variable (say, today's date) fails the probe: renders then go
    to apply_chat_template, and show the variable as it does."""
    import transformers.tokenization_utils_base as tub

    tok = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    original = tub.render_jinja_template
    monkeypatch.setattr(tub, "render_jinja_template", lambda **kw: original(**kw, date_string="26 Jul 2024"))
    monkeypatch.setattr(template_inputs, "_VERIFIED", {})
    template = "{{ date_string }}|{{ messages | length }}"
    messages = [{"role": "user", "content": "hi"}]
    assert _fast(tok, template, messages) == _reference(tok, template, messages) == ("text", "26 Jul 2024|1")
    assert template_inputs._VERIFIED[type(tok)] is False


def test_a_tokenizer_class_with_its_own_apply_chat_template_is_left_to_it(loaded, monkeypatch) -> None:
    base = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    calls: list[bool] = []

    class Own(type(base)):  # type: ignore[misc]
        def apply_chat_template(self, *args, **kwargs):
            calls.append(kwargs["add_generation_prompt"])
            return "own"

    tok = copy.copy(base)
    tok.__class__ = Own
    monkeypatch.setattr(template_inputs, "_VERIFIED", {})
    assert render_text(tok, "{{ messages | length }}", [{"role": "user", "content": "hi"}], None, True, {}) == "own"
    assert calls == [True]  # the render's alone: the probe is not even tried on a class of its own
    assert template_inputs._VERIFIED[Own] is False


@pytest.mark.parametrize(
    "messages",
    [[], [{"role": "user", "content": "hi"}, "not a message"], [[{"role": "user", "content": "batched"}]]],
)
def test_inputs_outside_the_probe_are_left_to_apply_chat_template(loaded, messages) -> None:
    tok = loaded("Qwen/Qwen2.5-7B-Instruct").tokenizer
    template = "{{ messages | length }}"
    ours, theirs = _fast(tok, template, messages), _reference(tok, template, messages)
    assert ours == theirs
