"""Template text quoted inside one line of a report: bounded, so that a cell never dumps a whole render."""

from __future__ import annotations

QUOTE_LIMIT = 40


def quoted(text: str, limit: int = QUOTE_LIMIT) -> str:
    """``repr(text)``, cut to ``limit`` characters (at a word end when one is near) with ``…`` and the full
    length when longer."""
    if len(text) <= limit:
        return repr(text)
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space >= limit * 2 // 3:
        head = head[:space]
    return f"{head + '…'!r} ({len(text)} chars)"


def clipped(line: str, limit: int) -> str:
    """A sentence cut at ``limit`` characters (a last resort for cells whose parts are already bounded)."""
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
