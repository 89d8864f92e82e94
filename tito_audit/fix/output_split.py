"""Splitting one ``{{ ... }}`` output so that a block tag can stand between its pieces.

A marker may have to fall inside an output (``{{ '<|im_start|>' + role + '\\n' }}``, the header ending inside
the last literal). Printing the pieces of a ``+``/``~`` chain one after another renders the same text as
printing the chain, so the output is rewritten as several outputs with the tag between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.rendering.template_source import (
    Source,
    Tag,
    block_tag,
    chain_operands,
    left_before,
    literal_of,
    right_after,
    split_literal,
)


@dataclass
class Cut:
    """A block tag to insert inside one output: before operand ``index`` or inside its literal at ``offset``."""

    index: int
    offset: int | None
    keyword: str
    order: int


def split_output(src: Source, tag: Tag, cuts: list[Cut]) -> str:
    """The variable tag split at ``cuts``: ``{{ a + 'x' }}{% generation %}{{ 'y' + b }}``.

    Printing the pieces of a ``+``/``~`` chain one after another renders the same text as printing the chain.
    """
    operands = chain_operands(tag.expr) or [list(tag.expr)]
    op = "+" if any(t.value == "+" for t in tag.expr if t.kind == "operator") else "~"
    # Pieces of each operand: its source text, or the parts of its literal cut at the requested offsets.
    offsets: dict[int, list[int]] = {}
    for c in cuts:
        if c.offset is not None:
            offsets.setdefault(c.index, []).append(c.offset)
    pieces: list[list[str]] = []
    for i, operand in enumerate(operands):
        lit = literal_of(operand)
        if i not in offsets or lit is None:
            pieces.append([src.span_text(operand)])
            continue
        string = next(t for t in operand if t.kind == "string")
        parts, raw, done = [], string.value, 0
        for off in sorted(set(offsets[i])):
            if 0 < off < len(lit):
                left, raw = split_literal(raw, off - done)
                parts.append(left)
                done = off
        pieces.append([*parts, raw])

    def position(c: Cut) -> tuple[int, int]:
        """(operand, piece) before which the cut falls."""
        if c.offset is None:
            return (c.index, 0)
        lit = literal_of(operands[c.index]) or ""
        if c.offset <= 0:
            return (c.index, 0)
        if c.offset >= len(lit):
            return (c.index + 1, 0)
        return (c.index, sorted({o for o in offsets[c.index] if 0 < o < len(lit)}).index(c.offset) + 1)

    flat = [(i, j) for i, ps in enumerate(pieces) for j in range(len(ps))]
    items: list[tuple[str, str]] = []  # ("expr", text) | ("tag", keyword)
    group: list[str] = []
    ordered = sorted(cuts, key=lambda c: (position(c), c.order))
    k = 0
    for i, j in [*flat, (len(operands), 0)]:
        while k < len(ordered) and position(ordered[k]) <= (i, j):
            if group:
                items.append(("expr", f" {op} ".join(group)))
                group = []
            items.append(("tag", ordered[k].keyword))
            k += 1
        if i < len(operands):
            group.append(pieces[i][j])
    if group:
        items.append(("expr", f" {op} ".join(group)))
    out = []
    for n, (kind, text) in enumerate(items):
        if kind == "expr":
            out.append("{{" + tag.left + " " + text + " " + tag.right + "}}")
        elif n == 0:
            out.append(block_tag(text, left_before(src, tag), ""))
        elif n == len(items) - 1:
            out.append(block_tag(text, "", right_after(src, tag)))
        else:
            out.append(block_tag(text))
    return "".join(out)
