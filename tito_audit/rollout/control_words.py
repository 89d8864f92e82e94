"""Control words: the literals a template writes as markup, found by their shape, and where two renders part.

A control word is the extent of one such literal: a run of non-space text between brackets (``<``/``>``,
``[``/``]``, either way round, repeated or not: ``<|im_end|>``, ``<turn|>``, ``[e~[``, ``]~b]``, ``[|endofturn|]``,
``<<eot>>``) holding a letter or digit; where a turn ends or opens (``runs``), also a space-delimited run between the
same markup character or a mirrored pair (``@@END@@``, ``{|end|}``). The shape only says where a word ends; which
words count is decided by the role of the region they stand in (``rollout.turn_roles``), so ``<tools>`` in a system
prompt's prose is no control token while ``<|channel>`` before reasoning is.

The alignment helpers (``shared``, ``rest``, ``suffix_start``, ``leading_words``) compare two renders of the same
probe and never cut a control word in two.
"""

from __future__ import annotations

import re
import unicodedata

from tito_audit.rollout.tokens import common_prefix_len

# A bracketed control word: a run of brackets (``<``/``>``, ``[``/``]``, either way round), text without brackets,
# quotes or spaces, a run of brackets.
_BRACKETED = re.compile(r"(?:<+|\[+|\]+)[^\s<>\[\]{}\"']{1,62}(?:>+|\[+|\]+)")
_RUN = re.compile(r"\S+")
_NOT_MARKUP = frozenset(".,:;!?-'\"()`*_=/\\")  # prose and markdown: ``User:``, ``(LLM)``, ``**Note**``


_PAIRED = {("Ps", "Pe"), ("Pi", "Pf"), ("Sm", "Sm")}  # opening/closing punctuation, quotes, ``<``/``>``


def _mirrored_pair(first: str, last: str) -> bool:
    """``first`` opens and ``last`` closes a bracket pair of any script (``{``/``}``, ``⟪``/``⟫``, ``«``/``»``,
    ``【``/``】``): two different bidi-mirrored characters, an opening and a closing one."""
    return (
        first != last
        and bool(unicodedata.mirrored(first))
        and bool(unicodedata.mirrored(last))
        and (unicodedata.category(first), unicodedata.category(last)) in _PAIRED
    )


def _delimited(run: str) -> bool:
    """A space-delimited run that reads as one control token of its own shape (``@@END@@``, ``{|end|}``, ``§eot§``):
    a letter or digit between the same markup character, or a mirrored pair, at both ends; no quote."""
    first, last = run[0], run[-1]
    return (
        3 <= len(run) <= 64
        and any(c.isalnum() for c in run)
        and not (first.isalnum() or first.isspace() or first in _NOT_MARKUP)
        and (last == first or _mirrored_pair(first, last))
        and not any(c in "\"'" for c in run)
    )


def spans(text: str, start: int = 0, end: int | None = None, runs: bool = False) -> list[tuple[int, int, str]]:
    """Where the control words of ``text[start:end]`` are: the bracketed words of each space-delimited run, and with
    ``runs`` (where a turn ends or opens: no prose there) a whole run of its own shape (``_delimited``), each with a
    letter or digit."""
    end = len(text) if end is None else end
    out: list[tuple[int, int, str]] = []
    for run in _RUN.finditer(text, start, end):
        inner = [m for m in _BRACKETED.finditer(text, run.start(), run.end()) if any(c.isalnum() for c in m.group())]
        found = [(m.start(), m.end(), m.group()) for m in inner]
        if runs:  # the rest of the run around its bracketed words: ``</tool_call>⟪eot⟫``
            cuts = [run.start(), *(i for m in inner for i in (m.start(), m.end())), run.end()]
            found += [
                (a, b, text[a:b]) for a, b in zip(cuts[::2], cuts[1::2], strict=True) if b > a and _delimited(text[a:b])
            ]
        out += sorted(found)
    return out


def control_words(text: str) -> list[str]:
    """The control words in ``text`` (see the module's docstring), in order."""
    return [w for _, _, w in spans(text)]


def first_word(text: str, after_text: bool = False) -> str | None:
    """The control word ``text`` starts with (after whitespace), or None; with ``after_text`` its first control
    word after any plain text (a closer the template writes after a signature of its own: ``-- sent by bot
    <|im_end|>``)."""
    found = spans(text, runs=True)
    return found[0][2] if found and (after_text or not text[: found[0][0]].strip()) else None


def shared(a: str, b: str) -> int:
    """Where ``b`` departs from ``a``, moved back to the start of a control word it would cut (``<|channel>`` and
    ``<|tool_call>`` share ``<|``, no word)."""
    n = common_prefix_len(a, b)
    for at, to, _ in spans(b, max(0, n - 64), n + 64):
        if at < n < to:
            return at
    return n


def rest(a: str, b: str) -> str:
    """``b`` after what it shares with ``a`` (``shared``)."""
    return b[shared(a, b) :]


def suffix_start(a: str, b: str) -> int:
    """Where the text ``b`` ends with what ``a`` ends with begins in ``b``, moved past a control word it would cut."""
    n = len(b) - common_prefix_len(a[::-1], b[::-1])
    for at, to, _ in spans(b, max(0, n - 64), min(len(b), n + 64)):
        if at < n < to:
            return to
    return n


def leading_words(tail: str | None, following: str | None) -> list[str]:
    """The control words ``following`` (what the template writes between an assistant turn's payload and the next
    payload) starts with after what it shares with ``tail`` (what it writes there when the turn is the last
    message), up to its first other text."""
    if following is None:
        return []
    at = shared(tail or "", following)
    own = control_words(tail or "")
    if own and following.find(own[-1]) >= 0:  # past the tail's last word (a call's history form may differ before it)
        at = max(at, following.find(own[-1]) + len(own[-1]))
    words: list[str] = []
    for start, end, word in spans(following, at, runs=True):
        if following[at:start].strip():
            break
        words.append(word)
        at = end
    return words
