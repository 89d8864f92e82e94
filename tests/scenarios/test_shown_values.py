"""``shown_values``: a value is shown in the forms a template writes it on every turn, and not where it is cut or
replaced (the marker test run on a plain function as renderer)."""

from __future__ import annotations

import html
import json
import sys
from typing import Any

from tito_audit.scenarios.shown_values import (
    MARKER,
    faithful,
    fold,
    in_order,
    in_place,
    leaves_shown,
    letters,
    mostly_in_order,
    shown,
    with_text,
)

RESULT = "Sunny, 21 C (probe 4417)."


def _render(form: Any) -> Any:
    def render(messages: Any) -> str:
        return "".join(f"<{m['role']}>{form(m['content'])}</{m['role']}>" for m in messages)

    return render


def _in_place(form: Any, whole: bool) -> bool:
    messages = [{"role": "user", "content": "Weather?"}, {"role": "tool", "content": RESULT}]
    render = _render(form)
    marked = {"role": "tool", "content": MARKER}
    return in_place(render, messages, 1, marked, RESULT, render(messages), whole=whole)


def test_shown_folds_case_unicode_form_and_whitespace() -> None:
    assert shown(RESULT, "x " + RESULT.upper() + " y")
    assert shown("ﬁle  report", "the FILE report")  # NFKC ligature, whitespace squeezed, case folded
    assert shown('say "hi"', 'say \\"hi\\"')  # JSON-escaped
    assert not shown(RESULT, "Sunny, 22 C")
    assert shown(RESULT, RESULT + RESULT, times=2) and not shown(RESULT, RESULT, times=2)  # one copy shows one


def test_in_order_and_mostly_in_order() -> None:
    assert in_order("Sunny, 21", "SUNNY ... 2 1")
    assert not in_order("Sunny, 21", "21 Sunny")
    assert mostly_in_order("value NaN here", "value null here")
    assert not mostly_in_order(RESULT, "Sunny")
    assert not mostly_in_order("...", "...")  # no letter or digit: proves nothing


def test_a_value_in_a_form_of_its_own_is_in_place() -> None:
    assert _in_place(str.upper, whole=True)
    assert _in_place(lambda c: c.replace(".", " ."), whole=True)
    assert _in_place(lambda c: c.replace("4417", "4418"), whole=False)  # a name: mostly there will do
    assert not _in_place(lambda c: c.replace("4417", "4418"), whole=True)  # a result or an argument: whole


def test_a_value_cut_stripped_or_replaced_is_not_in_place() -> None:
    assert not _in_place(lambda c: c[:6], whole=True)
    assert not _in_place(lambda c: "".join(ch for ch in c if not ch.isdigit()), whole=True)
    assert not _in_place(lambda c: f"({len(c)} characters)", whole=False)
    assert not _in_place(lambda c: "[omitted]", whole=False)  # the marker is replaced too


def test_a_place_before_start_is_not_in_place() -> None:
    """A call's name must be written in the model's own turn: the same place read before ``start`` (the history the
    template writes first) does not count (DeepSeek-R1-Distill's template writes a later call turn's calls inside
    the previous tool block; that turn's calls were called shown)."""
    messages = [{"role": "user", "content": "Weather?"}, {"role": "tool", "content": RESULT}]
    render = _render(str.upper)
    full = render(messages)
    marked = {"role": "tool", "content": MARKER}
    assert in_place(render, messages, 1, marked, RESULT, full, start=full.index("<tool>"))
    assert not in_place(render, messages, 1, marked, RESULT, full, start=full.index("</tool>"))


def test_a_marker_keeps_the_content_shape() -> None:
    """A template that reads content as a list of parts gets parts (SmolVLM's templates iterate them): a marker
    written as a plain string was never written, and every result was called dropped."""
    content = [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]
    parts = {"role": "tool", "content": content}
    assert with_text(parts, MARKER)["content"] == [
        {"type": "text", "text": MARKER},
        {"type": "image"},
        {"type": "text", "text": ""},
    ]
    assert with_text({"role": "tool", "content": "a"}, MARKER)["content"] == MARKER


def test_terminal_colours_are_not_content() -> None:
    """A shell's output with ANSI colours, written without them on every turn: every letter and digit of the
    content is there."""
    assert in_order("\x1b[31mERROR\x1b[0m: disk 91% full", "ERROR: disk 91% full")
    assert not in_order("ERROR: disk 91% full", "ERROR: disk full")


def test_letters_keep_what_isalnum_keeps_on_every_code_point() -> None:
    """``letters`` drops with one pattern what ``str.isalnum`` rejects (a faster form of the same filter): the same
    answer on every Unicode code point, surrogates included, all in one text."""
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    assert letters(every) == "".join(c for c in fold(every) if c.isalnum())
    assert letters("a_b-c 1\u00b2\u0663") == "abc12\u0663"


def test_faithful_undoes_forms_and_sees_rewrites() -> None:
    """A place holds a value whole in another case, escaped as JSON, Python or HTML write it, re-spaced around
    punctuation, or with terminal colours; not with a sign, a decimal point, a digit, a quote or a space between
    numbers dropped or added (red team 33: each kept every letter and digit in order)."""
    value = 'cold -5.5 C, ids 12 7; say "hi"\n<ok> & done'
    forms = [
        value.upper(),
        json.dumps(value)[1:-1],
        json.dumps(json.dumps({"v": value}))[1:-1],  # arguments sent as a JSON string, serialized again
        repr(value)[1:-1],
        html.escape(value),
        value.replace(", ", " ,  ").replace("\n", " "),
        f"\x1b[31m{value}\x1b[0m",
        f"header: {value} (end)",
    ]
    for form in forms:
        assert faithful(value, form), form
    for rewrite in ("-", ""), (".", ""), ("12 7", "127"), ("5 C", "50 C"), ('"', ""), ("cold ", "cold +"):
        assert not faithful(value, value.replace(*rewrite)), rewrite
    assert not faithful("", value)


def test_leaves_shown_counts_repeats_by_type() -> None:
    """Each leaf held k times must be written k times (red team 44: ``|unique`` on an array was a clean SAFE), and
    ``1`` is not ``true`` (Python's ``1 == True`` must not merge them)."""
    tags = ["Paris", "Paris", "Lyon"]
    assert leaves_shown(tags, json.dumps(tags)) and not leaves_shown(tags, '["Paris", "Lyon"]')
    assert leaves_shown([6, 6, 2], "[6, 6, 2]") and not leaves_shown([6, 6, 2], "[6, 2]")
    assert leaves_shown([1, True], "[1, true]") and not leaves_shown([1, True], "[1, 1]")
    nested = {"a": 1, "b": {"a": 1}}
    assert leaves_shown(nested, json.dumps(nested)) and not leaves_shown(nested, '{"a": 1, "b": {}}')
