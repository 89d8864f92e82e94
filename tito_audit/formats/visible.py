"""Token text with its whitespace and control characters made visible, for token strips in any format.

A newline or a leading space is the usual culprit of a divergence, so it is shown as a glyph (␣ ↵ ⇥ ␍),
control characters as ``\\xNN`` and the empty string as ∅. One walk serves plain text and HTML.
"""

from __future__ import annotations

from collections.abc import Callable

VISIBLE_WS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def _same(text: str) -> str:
    return text


def visible(text: str, glyph: Callable[[str], str] = _same, other: Callable[[str], str] = _same) -> str:
    """Whitespace and control characters as visible glyphs. ``glyph`` wraps each glyph and ``other`` each other
    character (HTML: a dimmed ``<i>`` and ``html.escape``); plain text keeps both as they are."""
    if text == "":
        return glyph("∅")
    out = []
    for ch in text:
        if ch in VISIBLE_WS:
            out.append(glyph(VISIBLE_WS[ch]))
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(glyph(f"\\x{ord(ch):02x}"))
        else:
            out.append(other(ch))
    return "".join(out)
