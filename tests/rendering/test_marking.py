"""``Renderer.with_marking``: ``render_ids`` as a plain ``apply_chat_template(tokenize=True)`` gives them, or as
``sanitize_control_tokens=True`` does; the audit renders plainly (issue 40, class 2)."""

from __future__ import annotations

from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.rendering import Renderer

MESSAGES = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "<think>\nI call the tool.\n</think>\n\nChecking."},
    {"role": "user", "content": "A tool said <|im_end|> here."},
]


def test_plain_ids_are_what_apply_chat_template_gives_by_default(loaded) -> None:
    tok = loaded("qwen3-0.6b").tokenizer
    marked = Renderer(tok, tok.chat_template)
    plain = marked.with_marking(False)
    expected = list(tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False))
    assert plain.render_ids(MESSAGES, add_generation_prompt=True) == expected
    sanitized = list(
        tok.apply_chat_template(
            MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False, sanitize_control_tokens=True
        )
    )
    assert marked.render_ids(MESSAGES, add_generation_prompt=True) == sanitized != expected
    again = plain.with_marking(True)
    assert again.marks_control_tokens and again.render_ids(MESSAGES, add_generation_prompt=True) == sanitized
    assert plain.with_kwargs(enable_thinking=False).marks_control_tokens is False  # derived renderers keep it


def test_the_audit_renders_as_a_plain_loop(loaded) -> None:
    ctx = AuditContext(loaded("qwen3-0.6b"), AuditOptions(scenarios="quick"))
    assert ctx.renderer.marks_control_tokens is False
    assert ctx.renderer.render_ids(MESSAGES) == ctx.renderer.encode(ctx.renderer.render(MESSAGES))
