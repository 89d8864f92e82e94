"""A value picked by looking a test up in a literal (``{True: A, False: B}[TEST]``, ``[B, A][TEST | int]``) is a
condition with two arms, counted like an inline ``if`` (rendering/coverage.py).

Red team 20's ten history rewrites keyed on two values of one message were clean SAFEs (exit 0) at e03860e: each
picked its rewrite by such a lookup, which template coverage had no arm for, and no conversation held the pair.
The screen of pairs finds five now (``tests/audit/search/test_pairs_in_one_message.py``), and since red team 29 a
sixth, an ``http://`` URL under a ``url`` key (below); the other four, keyed on what no conversation holds together
(an email and a URL in one call, the second of parallel calls, a result not last of its block, a name, no id and
digits: three values), are SAFEs that name the lookup's untaken arm (``not_probed:template_line:N``;
``tests/data/coverage/lookups/``)."""

from __future__ import annotations

from collections.abc import Callable

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


def _player(template: str) -> Callable[[list[dict[str, str]]], list[str]]:
    """Renders through the template's instrumented copy, each checked to give the template's own text (the probes
    change none), returning the arms history can reach that no render so far took."""
    tokenizer = load("qwen3-0.6b").tokenizer
    found = TemplateBranches(template_code(template), compiled_template(template).debug_info)
    copy = found.instrumented(compiled_template(template))
    recorder = Recorder()

    def play(messages: list[dict[str, str]]) -> list[str]:
        ours = render_compiled(copy, tokenizer, messages, None, False, {}, {PROBE: recorder.probe})
        assert ours == render_text(tokenizer, template, messages, None, False, {})
        return [b.test for b in found.unexercised(recorder.ran)]

    return play


def test_the_instrumented_copy_counts_the_value_a_lookup_picks() -> None:
    play = _player(TEMPLATE)
    assert play([{"role": "user", "content": "hi"}]) == ["message.content.isdigit()", "(message.content == 'x')|int"]
    assert play([{"role": "user", "content": "42"}]) == ["(message.content == 'x')|int"]
    assert play([{"role": "user", "content": "x"}]) == []


LOOKUPS = DATA / "coverage" / "lookups"


# found since red team 29: each literal a template looks for is written at a text's edges too, and this one's
# ``'http://'`` then starts a ``url`` argument the screen of pairs sends
FOUND = {"http_url_argument_compacted_in_history"}


@pytest.mark.parametrize("name", sorted(p.stem for p in LOOKUPS.glob("*.jinja")))
def test_a_rewrite_hidden_behind_a_lookup_of_a_pair_is_named(name: str) -> None:
    """Red team 20's templates, each a history rewrite keyed on two values of one message that no conversation
    holds together: a SAFE naming the lookup's untaken arm, never a clean one (or found, where a conversation now
    holds the pair)."""
    report = audit_of(MODEL, LOOKUPS / f"{name}.jinja")
    if name in FOUND:
        assert report.verdict == "unsafe" and report.scenarios["search"]["counterexamples"], report.verdict_reasons
        return
    named = report.scenarios.get("not_probed", [])
    assert report.verdict == "safe", report.verdict_reasons  # the pair is in no conversation: nothing breaks
    assert any(r.startswith("template_line:") and "hist" in r for r in named), named


CHOICES = """{%- for message in messages %}
{{- {'[]': 'No results.', 'null': 'No results.'}.get(message.content|trim, message.content) }}
{{- {'user': 'U: ', 'assistant': 'A: '}[message.role] }}
{{- {'x': 'X', 'y': 'Y'}[message.content|list] }}
{%- endfor %}"""


def _choices() -> TemplateBranches:
    return TemplateBranches(template_code(CHOICES), compiled_template(CHOICES).debug_info)


def test_a_lookup_among_constant_keys_has_an_arm_per_key_and_one_for_a_get_default() -> None:
    """Red team 26 hid history rewrites of empty results, error texts and a ``think`` tool behind ``.get`` lookups
    on string keys: each key is an arm, and so is ``.get``'s default; a ``[]`` lookup's missing key is none (a map of
    every role would name it on every template)."""
    arms = [(b.line, b.test) for b in _choices().branches if b.history]
    assert arms == [
        (2, "message.content|trim == '[]'"),
        (2, "message.content|trim == 'null'"),
        (2, "else of message.content|trim in ('[]', 'null')"),
        (3, "message.role == 'user'"),
        (3, "message.role == 'assistant'"),
        (4, "message.content|list == 'x'"),
        (4, "message.content|list == 'y'"),
    ]


def test_the_instrumented_copy_counts_the_key_a_lookup_finds() -> None:
    player = _player(CHOICES)

    def play(messages: list[dict[str, str]]) -> set[str]:
        return set(player(messages))

    # a list is no key a dict can hold: the lookup finds none, as jinja's does, and the probe does not raise
    first = play([{"role": "user", "content": "hi"}])
    assert first == {
        "message.content|trim == '[]'",
        "message.content|trim == 'null'",
        "message.role == 'assistant'",
        "message.content|list == 'x'",
        "message.content|list == 'y'",
    }
    assert play([{"role": "assistant", "content": " [] "}]) == first - {
        "message.content|trim == '[]'",
        "message.role == 'assistant'",
    }


CHOSEN = DATA / "coverage" / "choices"


@pytest.mark.parametrize(
    ("name", "arm"),
    [
        ("think_tool_dropped_in_history", "== 'think/True'"),
        ("empty_answer_dropped_in_history", "== 'assistant/True'"),
        ("fernet_token_redacted_in_history", "== 1"),
    ],
)
def test_a_rewrite_chosen_by_a_key_no_conversation_holds_is_named(name: str, arm: str) -> None:
    """Red team 26's rewrites picked by ``.get`` on a key no conversation holds (a call of a tool named ``think``, an
    empty answer), clean SAFEs on f3108b0, and red team 27's picked by an index into three values (a token returned),
    a clean SAFE on cac55d2: SAFEs naming the key's arm now, never a clean one."""
    report = audit_of(MODEL, CHOSEN / f"{name}.jinja")
    named = report.scenarios.get("not_probed", [])
    assert report.verdict == "safe", report.verdict_reasons
    assert any(r.startswith("template_line:") and r.endswith(arm) for r in named), named


def test_an_index_into_three_values_or_more_has_an_arm_per_index() -> None:
    """``[c, NEW, c][(hist and COND)|int]``: red team 27 hid nine history rewrites behind it. Each index is an arm,
    and a negative index picks the same arm as its positive one."""
    template = """{%- for message in messages %}
{{- [message.content, 'NEW', message.content][message.content|length] }}
{{- ['a', 'b', 'c'][-1 if message.role == 'user' else 0] }}
{%- endfor %}"""
    play = _player(template)
    assert play([{"role": "user", "content": ""}]) == [
        "message.content|length == 1",
        "message.content|length == 2",
        "else of message.role == 'user'",
        "((-1) if (message.role == 'user') else 0) == 0",
        "((-1) if (message.role == 'user') else 0) == 1",
    ]
    assert play([{"role": "assistant", "content": "x"}]) == [
        "message.content|length == 2",  # no key picks it: named, as an else no conversation takes is
        "((-1) if (message.role == 'user') else 0) == 1",
    ]


@pytest.mark.parametrize(
    "key",
    [
        "(message.content == 'x')|int",
        "message.content.startswith('x')",
        "((not loop.last) and [message.content.endswith('y'), 'z' in message.content]|min)|int",
        "(message.content is string and message.role != 'tool')|int",
    ],
)
def test_an_index_a_test_gives_picks_the_first_two_values_only(key: str) -> None:
    """A key that is True or False (a comparison, a test, a str predicate, ``and`` of those, ``min`` of a list of
    them, ``|int`` of one) picks index 0 or 1: the third value of red team 27's ``[c, NEW, c]`` is no arm, and naming
    it was a caveat no conversation could clear (its controls' SAFEs). A key that is any number keeps three."""
    lookup = "{{- [message.content, 'NEW', message.content][" + key + "] }}"
    template = "{%- for message in messages %}" + lookup + "{%- endfor %}"
    found = TemplateBranches(template_code(template), compiled_template(template).debug_info)
    picked = sorted(b.test.rsplit(" == ", 1)[1] for b in found.branches if " == " in b.test and "NEW" not in b.test)
    assert picked[-2:] == ["0", "1"] and "2" not in picked, [b.test for b in found.branches]
