"""A value picked by looking a test up in a literal (``{True: A, False: B}[TEST]``, ``[B, A][TEST | int]``) is a
condition with two arms, counted like an inline ``if`` (rendering/coverage.py).

Red team 20's ten history rewrites keyed on two values of one message were clean SAFEs (exit 0) at e03860e: each
picked its rewrite by such a lookup, which template coverage had no arm for, and no conversation held the pair.
The screen of pairs finds five now (``tests/audit/search/test_pairs_in_one_message.py``); the other five, keyed on
what no conversation holds together (an ``http://`` URL under a ``url`` key, an email and a URL in one call, the
second of parallel calls, a result not last of its block, a name, no id and digits: three values), are SAFEs that
name the lookup's untaken arm (``not_probed:template_line:N``; ``tests/data/coverage/lookups/``)."""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import MODEL
from tests.conftest import DATA, audit_of
from tito_audit import load
from tito_audit.rendering.analysis import compiled_template, template_code
from tito_audit.rendering.coverage import PROBE, Recorder, TemplateBranches
from tito_audit.rendering.template_inputs import render_compiled, render_text

TEMPLATE = """{%- for message in messages %}
{{- {True: 'value=' ~ message.content, False: message.content}[message.content.isdigit()] }}
{{- ['', '!'][(message.content == 'x') | int] }}
{{- {'a': 1, 'b': 2}[message.role[:1] ~ ''] if false else '' }}
{%- endfor %}"""


def _branches() -> TemplateBranches:
    return TemplateBranches(template_code(TEMPLATE), compiled_template(TEMPLATE).debug_info)


def test_a_lookup_of_a_test_in_a_literal_has_two_arms() -> None:
    arms = [(b.line, b.test) for b in _branches().branches if b.history]
    assert (2, "message.content.isdigit()") in arms and (2, "else of message.content.isdigit()") in arms, arms
    assert (3, "(message.content == 'x')|int") in arms and (3, "else of (message.content == 'x')|int") in arms, arms
    assert not any("role" in test for _, test in arms)  # a dict of other keys is no two-way lookup


def test_the_instrumented_copy_counts_the_value_a_lookup_picks() -> None:
    tokenizer = load("qwen3-0.6b").tokenizer
    found = _branches()
    copy = found.instrumented(compiled_template(TEMPLATE))
    recorder = Recorder()

    def play(messages: list[dict[str, str]]) -> list[str]:
        ours = render_compiled(copy, tokenizer, messages, None, False, {}, {PROBE: recorder.probe})
        assert ours == render_text(tokenizer, TEMPLATE, messages, None, False, {})
        return [b.test for b in found.unexercised(recorder.ran)]

    assert play([{"role": "user", "content": "hi"}]) == ["message.content.isdigit()", "(message.content == 'x')|int"]
    assert play([{"role": "user", "content": "42"}]) == ["(message.content == 'x')|int"]
    assert play([{"role": "user", "content": "x"}]) == []


LOOKUPS = DATA / "coverage" / "lookups"


@pytest.mark.parametrize("name", sorted(p.stem for p in LOOKUPS.glob("*.jinja")))
def test_a_rewrite_hidden_behind_a_lookup_of_a_pair_is_named(name: str) -> None:
    """Red team 20's templates, each a history rewrite keyed on two values of one message that no conversation
    holds together: a SAFE naming the lookup's untaken arm, never a clean one."""
    report = audit_of(MODEL, LOOKUPS / f"{name}.jinja")
    named = report.scenarios.get("not_probed", [])
    assert report.verdict == "safe", report.verdict_reasons  # the pair is in no conversation: nothing breaks
    assert any(r.startswith("template_line:") and "hist" in r for r in named), named
