"""Token text with its whitespace and control characters made visible, for token strips in any format.

A newline or a leading space is the usual culprit of a divergence, so it is shown as a glyph (␣ ↵ ⇥ ␍),
control characters as ``\\xNN`` and the empty string as ∅. One walk serves plain text and HTML.
"""

from __future__ import annotations

from collections.abc import Callable

VISIBLE_WS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def _same(text: str) -> str:
    return text


def visible_pieces(text: str) -> list[tuple[bool, str]]:
    """``text`` as runs: ``(True, glyph)`` for each whitespace or control character (its glyph), ``(False, run)``
    for the characters between them; the empty string is the glyph ∅."""
    if text == "":
        return [(True, "∅")]
    out: list[tuple[bool, str]] = []
    for ch in text:
        if ch in VISIBLE_WS:
            out.append((True, VISIBLE_WS[ch]))
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append((True, f"\\x{ord(ch):02x}"))
        elif out and not out[-1][0]:
            out[-1] = (False, out[-1][1] + ch)
        else:
            out.append((False, ch))
    return out


def visible(text: str, glyph: Callable[[str], str] = _same, other: Callable[[str], str] = _same) -> str:
    """Whitespace and control characters as visible glyphs. ``glyph`` wraps each glyph and ``other`` each run of
    other characters; plain text keeps both as they are (the HTML page writes ``visible_pieces`` itself)."""
    return "".join(glyph(piece) if is_glyph else other(piece) for is_glyph, piece in visible_pieces(text))
