"""The words a template compares a whole text with (``rendering/compared_literals.py``): the search's sweep of
content forms sends each as a result, so a rewrite keyed on a result that *is* one of them runs."""

from __future__ import annotations

import pytest

from tito_audit.audit.search.space import _at_edges
from tito_audit.rendering.analysis import message_reads, template_compared_literals


def _loop(body: str) -> str:
    return "{%- for message in messages %}{%- set c = message.content|string %}" + body + "{%- endfor %}"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("{{ 'null' if c == 'None' else c }}", ("None",)),
        ("{{ 'x' if 'OK' != c }}", ("OK",)),
        ("{{ 'x' if c in ['yes', 'no'] }}", ("yes", "no")),
        ("{{ 'x' if c is equalto('done') }}", ("done",)),
        ("{{ {'None': 'null', 'True': 'true'}[c] }}", ("None", "True")),
        ("{%- set table = {'NaN': 'null'} %}{{ table.get(c, c) }}", ("NaN",)),
        # red team 27: ``selectattr`` over a literal list of pairs, the text compared with each pair's first item
        (
            "{%- set pairs = [['None', 'null'], ['yes', 'true']] %}"
            "{{ ((pairs|selectattr('0', 'equalto', c)|map(attribute='1')|list) + [c])|first }}",
            ("None", "null", "yes", "true"),
        ),
        ("{{ messages|selectattr('content', 'equalto', 'STOP')|list|length }}", ("STOP",)),
    ],
)
def test_every_way_of_comparing_a_whole_text_is_read(body: str, words: tuple[str, ...]) -> None:
    assert template_compared_literals(_loop(body)) == words


@pytest.mark.parametrize(
    "body",
    [
        "{{ 'x' if message.role == 'user' }}",  # the format's own names: every conversation sends them
        "{{ 'x' if message['role']|lower != 'tool' }}",
        "{{ messages|selectattr('role', 'equalto', 'system')|list|length }}",
        "{{ 'x' if 'error' in c }}",  # a text looked for inside another (``scenarios.reach`` plays those)
        "{{ 'x' if 'a' == 'b' }}",  # two constants: nothing of the conversation compared
        "{{ c.startswith('HTTP/1.1') }}",
    ],
)
def test_what_is_not_a_whole_text_compared_is_left_out(body: str) -> None:
    assert template_compared_literals(_loop(body)) == ()


def test_a_template_that_does_not_parse_compares_nothing() -> None:
    assert template_compared_literals("{% if %}") == ()


@pytest.mark.parametrize(
    ("body", "characters"),
    [
        ("{{ c.translate({8216: 39, 8217: 39}) }}", "\u2018\u2019"),
        ("{%- set table = {173: None} %}{{ c.translate(table) }}", "\u00ad"),
        ("{{ c.translate(c.maketrans('\u201c\u201d', '\"\"')) }}", "\u201c\u201d"),
    ],
)
def test_the_characters_a_table_translates_are_read(body: str, characters: str) -> None:
    """Red team 29 translated curly quotes, soft hyphens and ligatures in earlier turns by a table, which no reading
    held: the search writes the table's characters now (``MessageReads.translated``)."""
    assert message_reads(_loop(body)).translated == characters


@pytest.mark.parametrize(
    ("literal", "text"),
    [
        ("TERMINATE", "TERMINATE before TERMINATE after TERMINATE"),
        ("\n\nSent from my iPhone", "before \n\nSent from my iPhone after \n\nSent from my iPhone"),
    ],
)
def test_a_literal_is_written_at_a_texts_edges(literal: str, text: str) -> None:
    """``removesuffix('TERMINATE')`` changes only a text that ends with it (red team 29); a literal that starts with
    whitespace is not written at a turn's start, which would start inside a token after ChatML's line end."""
    assert _at_edges(literal) == text
