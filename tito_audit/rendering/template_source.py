"""A chat template's own text as a tree of tags with exact source spans, so that patches are edits of that text.

Jinja's parser drops columns, so we run Jinja's own lexer (configured as transformers compiles templates:
``trim_blocks``, ``lstrip_blocks``) and align its raw tokens with the source. Every tag knows its span and its
whitespace-control modifiers; block tags are nested into ``if``/``for``/... blocks. Patches are lists of
``Edit`` (replace ``text[start:end]``); helpers here build inserted tags whose whitespace control keeps every
render byte-identical (the proof checks that, too).
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

# Block keywords that open a body closed by ``end<keyword>``, and the middle tags each accepts.
_OPENERS: dict[str, tuple[str, ...]] = {
    "if": ("elif", "else"),
    "for": ("else",),
    "macro": (),
    "call": (),
    "filter": (),
    "set": (),
    "generation": (),
    "with": (),
    "block": (),
    "autoescape": (),
}
# Names and operators that bind looser than ``+``/``~``: an expression using one at top level is not a chain.
_LOOSE_NAMES = frozenset({"if", "else", "and", "or", "not", "in"})
_LOOSE_OPS = frozenset({"==", "!=", "<", ">", "<=", ">=", "-"})
_WS = " \t\n\r\f\v"


class PatchError(Exception):
    """The template's structure does not support this rewrite; the message says where and why."""


@dataclass(frozen=True)
class Tok:
    kind: str
    value: str
    start: int
    end: int


@dataclass
class Tag:
    kind: str  # "block" | "var" | "comment" | "raw"
    start: int
    end: int  # just after the closing delimiter, before any whitespace the delimiter strips
    left: str  # whitespace control after the opening delimiter: "", "-" or "+"
    right: str  # before the closing delimiter
    toks: list[Tok] = field(default_factory=list)  # inner tokens, whitespace excluded

    @property
    def keyword(self) -> str:
        return self.toks[0].value if self.kind == "block" and self.toks and self.toks[0].kind == "name" else ""

    @property
    def expr(self) -> list[Tok]:
        """The expression: after the keyword of a block tag, everything in a variable tag."""
        return self.toks[1:] if self.kind == "block" else list(self.toks)


@dataclass
class Data:
    start: int
    end: int


@dataclass
class Leaf:
    """A tag that is not structural: ``{{ output }}``, ``{% set x = y %}``, a comment, a raw block."""

    tag: Tag


@dataclass
class Branch:
    tag: Tag  # the tag that opens this branch (``if``/``elif``/``else``/``for``...)
    body: list[Node]


@dataclass
class Block:
    keyword: str
    branches: list[Branch]
    end_tag: Tag

    @property
    def first_tag(self) -> Tag:
        return self.branches[0].tag


Node = Data | Leaf | Block


def environment() -> Any:
    """The Jinja environment transformers renders with (same lexer settings and extensions)."""
    from tito_audit import compat

    return compat.compile_cache().compile("{{ '' }}").environment


def decode_literal(raw: str) -> str:
    """The value of a Jinja string literal given with its quotes, exactly as Jinja's lexer computes it."""
    body = raw[1:-1].replace("\r\n", "\n").replace("\r", "\n")
    return codecs.decode(body.encode("ascii", "backslashreplace"), "unicode-escape")


def split_literal(raw: str, offset: int) -> tuple[str, str]:
    """Two literals whose values are ``value[:offset]`` and ``value[offset:]``, keeping the original escapes."""
    quote, body, value = raw[0], raw[1:-1], decode_literal(raw)
    for cut in range(len(body) + 1):
        left, right = quote + body[:cut] + quote, quote + body[cut:] + quote
        try:
            if decode_literal(left) == value[:offset] and decode_literal(right) == value[offset:]:
                return left, right
        except UnicodeDecodeError:
            continue
    raise PatchError(f"cannot split the string literal {raw[:40]!r} at character {offset}")


class Source:
    """Tokens, tags and the block tree of one template text."""

    def __init__(self, text: str) -> None:
        if "\r" in text:
            raise PatchError("the template uses CR line endings; rewrite it with LF first")
        self.text = text
        self.toks = list(self._aligned_tokens())
        self.tags = self._tags()
        self.tree = self._tree()

    # -- lexing -------------------------------------------------------------------------------------------

    def _aligned_tokens(self) -> Iterator[Tok]:
        env = environment()
        pos = 0
        for _, kind, value in env.lexer.tokeniter(self.text, None):
            if kind.endswith("_begin"):
                while pos < len(self.text) and not self.text.startswith(value, pos) and self.text[pos] in _WS:
                    pos += 1
            if not self.text.startswith(value, pos):
                raise PatchError(f"cannot align the template's tokens at character {pos}")
            yield Tok(kind, value, pos, pos + len(value))
            pos += len(value)

    def _tags(self) -> list[Tag]:
        tags: list[Tag] = []
        current: Tag | None = None
        pairs = {"block_begin": "block", "variable_begin": "var", "comment_begin": "comment", "raw_begin": "raw"}
        for tok in self.toks:
            if tok.kind in pairs and current is None:
                left = tok.value[2:3] if tok.kind != "raw_begin" else ""
                current = Tag(pairs[tok.kind], tok.start, tok.end, left if left in "-+" else "", "")
                if tok.kind == "raw_begin":
                    continue
            elif tok.kind in ("block_end", "variable_end", "comment_end", "raw_end") and current is not None:
                delimiter = tok.value.rstrip(_WS)
                current.end = tok.start + len(delimiter)
                current.right = delimiter[0] if delimiter[0] in "-+" and tok.kind != "raw_end" else ""
                tags.append(current)
                current = None
            elif current is not None and tok.kind not in ("whitespace", "comment", "data"):
                current.toks.append(tok)
        return tags

    def _tree(self) -> list[Node]:
        root: list[Node] = []
        stack: list[tuple[Block | None, list[Node]]] = [(None, root)]
        pos = 0
        for tag in self.tags:
            body = stack[-1][1]
            if tag.start > pos:
                body.append(Data(pos, tag.start))
            pos = tag.end
            kw = tag.keyword
            top = stack[-1][0]
            if kw in _OPENERS and not (kw == "set" and any(t.value == "=" for t in tag.toks)):
                block = Block(kw, [Branch(tag, [])], tag)
                body.append(block)
                stack.append((block, block.branches[0].body))
            elif top is not None and kw in _OPENERS[top.keyword]:
                top.branches.append(Branch(tag, []))
                stack[-1] = (top, top.branches[-1].body)
            elif top is not None and kw == "end" + top.keyword:
                top.end_tag = tag
                stack.pop()
            elif kw.startswith("end") and kw[3:] in _OPENERS:
                raise PatchError(f"unbalanced {{% {kw} %}} at character {tag.start}")
            else:
                body.append(Leaf(tag))
        if len(stack) != 1:
            raise PatchError("unclosed block in the template")
        if pos < len(self.text):
            root.append(Data(pos, len(self.text)))
        return root

    # -- navigation ---------------------------------------------------------------------------------------

    def line(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def span_text(self, toks: Sequence[Tok]) -> str:
        return self.text[toks[0].start : toks[-1].end] if toks else ""

    def tag_text(self, tag: Tag) -> str:
        return self.text[tag.start : tag.end]

    def prev_tag(self, pos: int) -> Tag | None:
        before = [t for t in self.tags if t.end <= pos]
        return before[-1] if before else None

    def next_tag(self, pos: int) -> Tag | None:
        return next((t for t in self.tags if t.start >= pos), None)

    def effective(self, data: Data) -> tuple[int, int]:
        """The part of a data run that renders, after the neighbouring tags' whitespace control."""
        a, b = data.start, data.end
        if b == len(self.text) and self.text.endswith("\n"):
            b -= 1  # Jinja drops one trailing newline (keep_trailing_newline=False)
        prev, nxt = self.prev_tag(a), self.next_tag(b)
        if prev is not None and prev.end == a:
            if prev.right == "-":
                while a < b and self.text[a] in _WS:
                    a += 1
            elif prev.right == "" and prev.kind in ("block", "comment", "raw") and self.text[a : a + 1] == "\n":
                a += 1
        if nxt is not None and nxt.start == b:
            if nxt.left == "-":
                while b > a and self.text[b - 1] in _WS:
                    b -= 1
            elif nxt.left == "" and nxt.kind in ("block", "comment", "raw"):
                line_start = self.text.rfind("\n", 0, b) + 1
                if line_start >= a and all(c in " \t" for c in self.text[line_start:b]):
                    b = line_start
        return a, b


def walk(nodes: Sequence[Node]) -> Iterator[Node]:
    """Every node, depth first, in source order."""
    for node in nodes:
        yield node
        if isinstance(node, Block):
            for branch in node.branches:
                yield from walk(branch.body)


def block_tags(node: Node) -> list[Tag]:
    """Every tag inside a node (its own and its children's)."""
    out: list[Tag] = []
    for n in walk([node]):
        if isinstance(n, Leaf):
            out.append(n.tag)
        elif isinstance(n, Block):
            out.extend(b.tag for b in n.branches)
            out.append(n.end_tag)
    return out


def _bracket_step(t: Tok) -> int:
    """+1 for an opening bracket, -1 for a closing one, 0 for any other token."""
    if t.kind == "operator" and t.value in "([{":
        return 1
    if t.kind == "operator" and t.value in ")]}":
        return -1
    return 0


def top_level(toks: Sequence[Tok]) -> Iterator[tuple[int, Tok]]:
    """(index, token) of the tokens outside any brackets."""
    depth = 0
    for i, t in enumerate(toks):
        step = _bracket_step(t)
        depth += step
        if not step and depth == 0:
            yield i, t


def parenthesized(toks: Sequence[Tok]) -> bool:
    """True when one pair of parentheses encloses the whole expression: ``(a or b)``, not ``(a) or (b)``."""
    if len(toks) < 2 or toks[0].value != "(" or toks[-1].value != ")":
        return False
    depth = 0
    for i, t in enumerate(toks):
        step = _bracket_step(t)
        depth += step
        if step < 0 and depth == 0 and i < len(toks) - 1:
            return False
    return True


def chain_operands(toks: Sequence[Tok]) -> list[list[Tok]] | None:
    """Operands of a top-level ``a + b + c`` (or ``a ~ b ~ c``) chain; None when the expression is not one.

    Printing the operands one after another renders the same text as printing their concatenation.
    """
    tops = list(top_level(toks))
    if any(
        (t.kind == "name" and t.value in _LOOSE_NAMES) or (t.kind == "operator" and t.value in _LOOSE_OPS)
        for _, t in tops
    ):
        return None
    plus = [i for i, t in tops if t.kind == "operator" and t.value == "+"]
    tilde = [i for i, t in tops if t.kind == "operator" and t.value == "~"]
    cuts = plus if plus else tilde
    out: list[list[Tok]] = []
    start = 0
    for i in [*cuts, len(toks)]:
        part = list(toks[start:i])
        if not part:
            return None
        out.append(part)
        start = i + 1
    return out


def literal_of(toks: Sequence[Tok]) -> str | None:
    """The value when the operand is one string literal (possibly parenthesised)."""
    inner = list(toks)
    while len(inner) >= 3 and inner[0].value == "(" and inner[-1].value == ")":
        inner = inner[1:-1]
    if len(inner) == 1 and inner[0].kind == "string":
        return decode_literal(inner[0].value)
    return None


@dataclass(frozen=True)
class Edit:
    start: int
    end: int
    text: str
    order: int = 0  # insertions at one position apply in this order


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping replacements (insertions at one position keep their ``order``)."""
    out: list[str] = []
    pos = 0
    for e in sorted(edits, key=lambda e: (e.start, e.end > e.start, e.order)):
        if e.start < pos:
            raise PatchError(f"overlapping edits at character {e.start}")
        out.append(text[pos : e.start])
        out.append(e.text)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)


def block_tag(keyword: str, left: str = "", right: str = "") -> str:
    return "{%" + left + " " + keyword + " " + right + "%}"


def right_after(src: Source, tag: Tag) -> str:
    """Right-hand whitespace control for a block tag inserted just after ``tag``: the text that follows is
    then trimmed exactly as ``tag`` trimmed it."""
    if tag.right in "-+" and tag.right:
        return tag.right
    if tag.kind == "var" and src.text[tag.end : tag.end + 1] == "\n":
        nxt = src.next_tag(tag.end)
        if nxt is not None and nxt.left == "-" and not src.text[tag.end : nxt.start].strip(_WS):
            return ""  # the next tag strips that whitespace anyway
        return "+"  # a variable tag keeps the newline; a plain block tag would trim it
    return ""


def left_before(src: Source, tag: Tag) -> str:
    """Left-hand whitespace control for a block tag inserted just before ``tag``."""
    if tag.left:
        return tag.left
    if tag.kind == "var":
        line_start = src.text.rfind("\n", 0, tag.start) + 1
        prefix = src.text[line_start : tag.start]
        if prefix and all(c in " \t" for c in prefix):
            return "+"  # lstrip_blocks would eat this indentation, which the variable tag keeps
    return ""


def in_data(src: Source, pos: int) -> tuple[str, str]:
    """Whitespace control for a block tag inserted inside rendered data at ``pos``."""
    line_start = src.text.rfind("\n", 0, pos) + 1
    prefix = src.text[line_start:pos]
    left = "+" if prefix and all(c in " \t" for c in prefix) else ""
    right = "+" if src.text[pos : pos + 1] == "\n" else ""
    return left, right
