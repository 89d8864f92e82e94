"""Whether a value a conversation carries (a tool result, a call's name or argument) is shown in a render, in
whatever form the template writes it on every turn.

The shape probe (``scenarios.shapes``), the simulated turns (``audit.simulation``: a call whose name is not in its
turn is emitted as text) and ``tool_support`` ask it: a template that drops tool results or calls teaches the model
to act on traffic it cannot see, and is UNSAFE. A template that writes them in a form of its own, with nothing
lost, shows them: JSON-escaped, as Python's ``repr`` writes them, with runs of whitespace squeezed, in another
letter case (``|upper``), in another Unicode form (NFKC), HTML-escaped, with punctuation added. Calling those drops
was a false UNSAFE on templates that write every turn alike and keep buffer + delta exact (red team 30's
controls). What a template does only to history is the appends' and the re-render's concern, not a drop.

The test for a form of the template's own is a marker: the conversation rendered once more with a marker where the
value was must show the marker (in any case); what the real render writes in the marker's place is then compared
with the value, letter by letter (letters and digits, case and Unicode form folded). A result or an argument must
be there whole, every letter and digit in order: one cut short, with its digits stripped, reduced to its first line
or to a note is dropped, and so is one with a word rewritten (``NaN`` written ``null``: a rewrite of the content
cannot be told from a loss by letters alone; red team 31 made five wrong greens of a looser rule). A call's name
must be there mostly (more than half its letters and digits, in order, inside the model's turn): a name written
camelCase, without a ``functions.`` namespace or with dots as underscores is the call, a name cut to a few letters
is not.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.scenarios.adapt import call_function

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # a terminal's control sequences (colours, cursor moves)
# characters nobody reads: control characters that are not whitespace (a bell, a backspace) and invisible format
# characters (a byte order mark, zero-width spaces and joiners, direction marks, a soft hyphen)
_INVISIBLE = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
_NOT_ALNUM = re.compile(r"[\W_]+")  # what ``str.isalnum`` rejects: ``\w`` is alnum or ``_`` (every code point)
MARKER = "Zq9argument"  # alphanumeric: every serialization writes it as it is, in some letter case
_MARKER = re.compile(re.escape(MARKER), re.IGNORECASE)
_PLACE_SLACK = 256  # characters of a marker's place read past the value's own length (a header the template adds)


def fold(text: str) -> str:
    """``text`` in one Unicode form (NFKC) and one letter case: what a template that changes either still shows."""
    return unicodedata.normalize("NFKC", text).casefold()


@lru_cache(maxsize=8)
def _folded(text: str) -> str:
    return fold(text)


@lru_cache(maxsize=8)
def _words(text: str) -> str:
    """``text`` with every run of whitespace written as one space (a render, kept for the values looked up in it)."""
    return " ".join(text.split())


def shown(value: str, text: str, times: int = 1) -> bool:
    """``value`` is in ``text`` (``times`` times or more: the k-th of k equal values needs k copies, one copy shows
    only one of them) verbatim, as a JSON string would escape it (``ensure_ascii`` or not), as Python's ``repr``
    would (a template that writes the arguments dict as it is), with its whitespace written otherwise (runs of
    spaces and newlines squeezed into one space: every word is there, in order), or in another letter case or
    Unicode form."""
    forms = (value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1])
    if any(text.count(form) >= times for form in forms if form):
        return True
    words = " ".join(value.split())
    if not words:
        return False
    return _words(text).count(words) >= times or _folded(_words(text)).count(fold(words)) >= times


def letters(text: str) -> str:
    """The letters and digits of ``text``, case and Unicode form folded, terminal escape sequences left out (a
    template that strips ANSI colours from a shell's output drops no content): what a template that respaces,
    repunctuates or cleans a text keeps."""
    return _NOT_ALNUM.sub("", fold(_ANSI.sub("", text)))


def in_order(value: str, text: str) -> bool:
    """Every letter and digit of ``value`` appears in ``text``, in order (case and Unicode form folded)."""
    it = iter(letters(text))
    return all(c in it for c in letters(value))


def faithful(value: str, place: str) -> bool:
    """``place`` (what a render writes where ``value`` was) holds ``value`` in a form that loses and adds nothing:
    after undoing an escape a serializer adds (JSON's and Python's backslash escapes, HTML's entities), the value's
    ``canonical`` text is in the place's. Case, Unicode form, terminal colours and spacing around punctuation
    (re-indented or compacted JSON, a space before each period) are forms; a sign, a decimal point, a quote or a
    slash dropped or added, a digit added, words run together, lines reordered or merged change what the model
    reads (red team 33: each a clean SAFE under the letters-in-order rule, ``in_order``, which alone ignores
    punctuation and allows insertions)."""
    want = canonical(value)
    if not want:
        return False
    return any(want in text for text in _decoded(place) | {canonical(_unescaped(html.unescape(place)))})


def canonical(text: str) -> str:
    """``text`` folded (``fold``), terminal escape sequences and characters nobody reads left out (a byte order
    mark, a bell, a zero-width space), every run of whitespace written as one space and a space kept only between
    two letters or digits: what every form of a value a template may write keeps, spacing that separates words or
    numbers included (``12 5`` is not ``125``)."""
    squeezed = " ".join(_INVISIBLE.sub("", fold(_ANSI.sub("", text))).split())
    return _LOOSE_SPACE.sub("", squeezed)


_LOOSE_SPACE = re.compile(r" (?=[\W_])|(?<=[\W_]) ")  # a space beside punctuation (after squeezing: one space)
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[nrtbf\"'\\/])")
_ESCAPED = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}


def _decoded(place: str) -> set[str]:
    """``place`` as it is and with a serializer's escapes undone (HTML's entities, JSON's and Python's backslash
    escapes, both; backslash escapes twice: arguments sent as a JSON string that the template serializes again),
    each ``canonical``: the texts ``faithful`` and ``leaves_shown`` look a value up in."""
    unescaped = _unescaped(place)
    twice = _unescaped(unescaped)
    return {canonical(c) for c in (place, html.unescape(place), unescaped, html.unescape(unescaped), twice)}


def _unescaped(text: str) -> str:
    """``text`` with JSON's and Python's backslash escapes undone (``\\n``, ``\\"``, ``\\u00e9``, a surrogate pair
    joined); other backslashes stay."""

    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if code[0] in "ux" and len(code) > 1:
            return chr(int(code[1:], 16))
        return _ESCAPED.get(code, code)

    out = _ESCAPE.sub(one, text)
    try:
        return out.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError:
        return out


def mostly_in_order(value: str, text: str) -> bool:
    """More than half of the letters and digits of ``value`` appear in ``text`` in order (case and Unicode form
    folded): a longest common subsequence. ``text`` is a marker's place: only its start, as long as the value plus
    some slack, is read (the value is the start of a result)."""
    want = letters(value)
    have = letters(text[: 2 * len(value) + _PLACE_SLACK])
    return _enough_letters(want, have) and _common_subsequence(want, have) * 2 > len(want)


def letters_present(value: str, text: str) -> bool:
    """More than half of the letters and digits of ``value`` are in ``text``, in any order (case and Unicode form
    folded): the cheap test ``mostly_in_order`` needs first, before a render is spent on a marker."""
    return _enough_letters(letters(value), letters(text))


def _enough_letters(want: str, have: str) -> bool:
    """More than half of the letters of ``want`` are in ``have``, in any order (what a subsequence needs first)."""
    return bool(want) and sum((Counter(want) & Counter(have)).values()) * 2 > len(want)


def _common_subsequence(short: str, long: str) -> int:
    """Length of the longest common subsequence of ``short`` and ``long`` (one row of ``len(short)`` at a time)."""
    row = [0] * (len(short) + 1)
    for ch in long:
        new = [0]
        for j, x in enumerate(short):
            new.append(row[j] + 1 if x == ch else max(row[j + 1], new[j]))
        row = new
    return row[-1]


def in_place(
    render: Callable[[Sequence[dict[str, Any]]], str],
    messages: Sequence[dict[str, Any]],
    i: int,
    marked: dict[str, Any],
    value: str | tuple[str, ...],
    full: str,
    whole: bool = True,
    start: int = 0,
) -> bool:
    """Rendered (``render``) with message ``i`` replaced by ``marked`` (a marker where the value was), the marker
    shows, and what the real render ``full`` writes in the marker's place holds the value: every letter and digit of
    it in order (``whole``, an argument), or more than half of them (a result; see the module docstring). ``start``:
    where in ``full`` the place must begin (a call's name must be in the model's own turn, not in the history the
    template writes before it). ``value`` may be a tuple of forms (a number or a mapping as JSON and as Python writes
    it): one of them must be there. A render that fails, and a value without a letter or digit, prove nothing: not
    shown."""
    forms = value if isinstance(value, tuple) else (value,)
    forms = tuple(f for f in forms if any(c.isalnum() for c in f))
    # the marker's place is part of the whole render: what it lacks, the place lacks
    forms = tuple(f for f in forms if (in_order(f, full) if whole else _enough_letters(letters(f), letters(full))))
    if not forms:
        return False
    place = marker_place(render, messages, i, marked, full, start)
    if place is None:
        return False
    return any(faithful(f, place) if whole else mostly_in_order(f, place) for f in forms)


def marker_place(
    render: Callable[[Sequence[dict[str, Any]]], str],
    messages: Sequence[dict[str, Any]],
    i: int,
    marked: dict[str, Any],
    full: str,
    start: int = 0,
) -> str | None:
    """What ``full`` writes where the render with message ``i`` replaced by ``marked`` writes the marker: the text
    between the two renders' common start and common end (None: the render fails, shows no marker, or differs
    before ``start``)."""
    try:
        other = render([*messages[:i], marked, *messages[i + 1 :]])
    except RenderError:
        return None
    marks = [m.span() for m in _MARKER.finditer(other)]
    if not marks:
        return None
    # the place never starts after the marker's first copy nor ends before its last: a value that begins or ends as
    # the marker does (``...t``, ``Z...``) keeps those characters in its place
    head = min(common_prefix_len(full, other), marks[0][0])
    if head < start:
        return None
    tail = min(common_prefix_len(full[head:][::-1], other[head:][::-1]), len(other) - marks[-1][1])
    return full[head : len(full) - tail]


def leaves_shown(value: Any, place: str) -> bool:
    """Every leaf of a mapping or array ``value`` is in ``place`` (escapes undone, ``canonical``): each string, number
    and boolean in a form JSON or Python writes it, a mapping's next to its key (within a few characters of
    punctuation or markup tokens: ``"score": 0.5``, ``score:0.5``, ``<score>0.5``, ``q:<escape>x``), in any order
    (a template may sort the keys and write them unquoted, as Gemma's do). A null may be left out (a template that
    writes only the keys that hold a value loses nothing a tool reads). ``0.5`` written ``0``, ``true`` written
    ``false``, a key left out are not shown; nor is a leaf held k times written fewer (red team 44: an array's
    repeats dropped, ``|unique``)."""
    texts = _decoded(place)
    typed = [((key, json.dumps(leaf)), leaf) for key, leaf in _leaves(value, "")]  # by type: ``1`` is not ``true``
    leaves, times = dict(typed), Counter(k for k, _ in typed)
    return all(any(_leaf_in(k[0], leaves[k], text, n) for text in texts) for k, n in times.items())


def whole_number(value: Any) -> tuple[str, ...]:
    """A whole float's integer form (``21.0`` → ``21``: JSON has one number type, a parser reads both alike), or
    nothing for any other value (a float past 2**53 has no exact integer to write)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return (str(int(value)),)
    return ()


def _leaves(value: Any, key: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, str(k))]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v, "")]  # an array's items, each whole, wherever written
    return [] if value is None else [(key, value)]


def _leaf_in(key: str, leaf: Any, text: str, times: int = 1) -> bool:
    if isinstance(leaf, str):
        body, end = re.escape(canonical(leaf)), ""
    else:  # a number or a boolean: whole, not the start of a longer one (``10`` is not in ``100``)
        forms = {json.dumps(leaf), repr(leaf), *whole_number(leaf)}
        body, end = "|".join(re.escape(canonical(f)) for f in sorted(forms)), r"(?![\w.])"
    if not body:
        return True  # an empty string: nothing to lose
    # between a key and its value: punctuation, or a markup token a template wraps strings in (``<escape>``)
    before = rf"{re.escape(canonical(key))}(?:[\W_]|<[^<>\s]{{1,16}}>){{0,12}}" if key else r"(?<![\w.])"
    if times == 1:
        return re.search(f"{before}(?:{body}){end}", text) is not None
    return len(re.findall(f"{before}(?:{body}){end}", text)) >= times


def name_in_place(
    render: Callable[[Sequence[dict[str, Any]]], str],
    messages: Sequence[dict[str, Any]],
    call: int,
    full: str,
    start: int,
) -> bool:
    """The last message's call ``call`` rendered (``render``, the same messages as ``full``) with a marker as its
    name shows the marker, and most of the name is written in the marker's place in ``full``, at ``start`` or
    after (inside the model's turn)."""
    message = messages[-1]
    calls = list(message.get("tool_calls") or [])
    fn = call_function(calls[call])
    name = str(fn.get("name") or "")
    if fn is calls[call]:  # a flat call: the name is the call's own key
        calls[call] = {**calls[call], "name": MARKER}
    else:
        calls[call] = {**calls[call], "function": {**fn, "name": MARKER}}
    marked = {**message, "tool_calls": calls}
    return in_place(render, messages, len(messages) - 1, marked, name, full, whole=False, start=start)


def with_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    """``message`` with its content's text replaced by ``text``, in the shape it has: a string, or a list of parts
    (the first text part holds ``text``, the other text parts are emptied, parts of other types stay; a template
    that reads parts must get parts, or a marker in their place is never written and the value is called dropped)."""
    content = message.get("content")
    if not isinstance(content, list):
        return {**message, "content": text}
    parts, written = [], False
    for part in content:
        if isinstance(part, dict) and "text" in part:
            parts.append({**part, "text": "" if written else text})
            written = True
        else:
            parts.append(part)
    return {**message, "content": parts if written else [{"type": "text", "text": text}, *parts]}
