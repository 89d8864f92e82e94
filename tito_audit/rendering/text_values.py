"""Which expressions of a template are texts whatever a conversation holds, read from its syntax tree.

A length a template tests may count characters or items: ``content|length > 40`` may count a list of parts,
``tool_calls|length > 16`` counts calls. ``scenarios.reach`` names a number past the parallel calls it plays as
``not_probed:parallel:N`` (a count of calls no scenario reaches). Where the number is only ever a text's length
(``(message.content|string)|length == 40``, ``text.split('\\n')[:3]``), no call count is read, and naming it was a
false caveat on every such template (red team 27's controls). ``TextValues`` tells them apart: a string constant, a
concatenation, a filter or str method whose value is a text (``|string``, ``|trim``, ``.strip()``), a slice of a
text, a piece of a split one, a variable every assignment of which is one. A message's ``content`` is not: it may be
a list of parts.
"""

from __future__ import annotations

from collections.abc import Sequence

from jinja2 import nodes

from tito_audit.rendering.fixed_values import COUNT_FILTERS

# Filters and str methods whose value is a text whatever they are given
TEXT_FILTERS = frozenset(
    {"string", "trim", "lower", "upper", "title", "capitalize", "replace", "tojson", "join", "striptags", "indent"}
    | {"center", "format", "truncate", "wordwrap", "urlize", "e", "escape", "forceescape", "urlencode"}
)
TEXT_METHODS = frozenset(
    {"strip", "lstrip", "rstrip", "lower", "upper", "replace", "format", "join", "title", "capitalize", "casefold"}
    | {"swapcase", "removeprefix", "removesuffix", "zfill", "center", "ljust", "rjust", "expandtabs"}
)
_SPLITS = frozenset({"split", "rsplit", "splitlines"})


def splits(node: nodes.Node, pieces: dict[str, int]) -> bool:
    """``node`` is a text split into pieces (``c.split('\\n')``, ``splitlines()``, a variable of ``pieces``: one
    holding a text's lines or words): its items are pieces of text, its length counts them."""
    if isinstance(node, nodes.Name):
        return node.name in pieces
    return isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr in _SPLITS


class TextValues:
    """The texts of one template: ``assigns``, each variable with a value it is set to; ``pieces``: the variables
    that hold a text's lines or words."""

    def __init__(self, assigns: Sequence[tuple[str, nodes.Node]], pieces: dict[str, int]) -> None:
        self.pieces = pieces
        self.texts: set[str] = set()
        values: dict[str, list[nodes.Node]] = {}
        for name, value in assigns:
            values.setdefault(name, []).append(value)
        for _ in range(4):  # a variable set from one that holds a text holds one
            texts = {name for name, given in values.items() if all(self.is_text(v) for v in given)}
            if texts == self.texts:
                break
            self.texts = texts

    def is_text(self, node: nodes.Node) -> bool:
        """``node`` is a text whatever the conversation holds (see the module docstring)."""
        if isinstance(node, nodes.Const):
            return type(node.value) is str
        if isinstance(node, nodes.Concat):
            return True
        if isinstance(node, nodes.Filter):
            return node.name in TEXT_FILTERS
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr):
            return node.node.attr in TEXT_METHODS
        if isinstance(node, nodes.Getitem):  # a slice of a text, or a piece of a split one (``c.split('\n')[0]``)
            return self.is_text(node.node) if isinstance(node.arg, nodes.Slice) else splits(node.node, self.pieces)
        if isinstance(node, nodes.CondExpr):
            return self.is_text(node.expr1) and node.expr2 is not None and self.is_text(node.expr2)
        return isinstance(node, nodes.Name) and node.name in self.texts

    def measures_text(self, node: nodes.Node) -> bool:
        """Every length or count ``node`` reads is a text's: a text's length or its pieces' count, or a count of
        what a text holds (``text.count(':')``); not an item's (``keys|map('length')``)."""
        return all(self._text_measure(sub) for sub in [node, *node.find_all((nodes.Filter, nodes.Call))])

    def _text_measure(self, sub: nodes.Node) -> bool:
        if isinstance(sub, nodes.Filter) and sub.name in COUNT_FILTERS and sub.node is not None:
            return self.is_text(sub.node) or splits(sub.node, self.pieces)
        if isinstance(sub, nodes.Filter) and sub.name == "map":
            return False
        if isinstance(sub, nodes.Call) and isinstance(sub.node, nodes.Getattr) and sub.node.attr == "count":
            return self.is_text(sub.node.node)
        return True
