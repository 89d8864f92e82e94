"""The string constants a template compares a whole text with, read from its syntax tree.

A template that rewrites a text only where it *is* a certain word (a tool that printed ``None``, a result that
says ``OK``) looks the word up in more ways than ``==``: ``c == 'None'``, ``c in ['None', 'null']``, ``c is
equalto('None')``, ``{'None': 'null', 'True': 'true'}[c]`` or ``.get(c, c)`` on a literal (or on a variable set to
one), ``pairs|selectattr('0', 'equalto', c)`` over a literal list of pairs (red team 27 hid a history rewrite behind
that one). No conversation of the search sent a result that is exactly such a word, so the rewrite never ran and the
template got a clean SAFE. ``compared_literals`` reads them all, so that the search's sweep of content forms sends
each as a whole tool result (``search.forms``).

Comparisons of a message's ``role`` or a part's ``type`` are left out: those constants are the format's own names
(``'user'``, ``'text'``), which every conversation sends where they belong.
"""

from __future__ import annotations

from collections.abc import Iterator

from jinja2 import nodes

from tito_audit.rendering.tree_order import descendants

MAX_COMPARED = 24  # constants kept, in the order the template first compares them
MAX_CHARS = 64  # characters of a constant kept (longer ones are texts a template looks for, not words it compares)
_EQUAL_TESTS = frozenset({"equalto", "eq", "==", "sameas", "in"})
_FILTERS = frozenset({"select", "reject", "selectattr", "rejectattr"})
_FORMAT_KEYS = frozenset({"role", "type"})  # keys whose values are the format's own names


def compared_literals(tree: nodes.Template) -> tuple[str, ...]:
    """The string constants the template compares a value that is not a constant with as a whole (see the module
    docstring), each once, at most ``MAX_COMPARED`` of at most ``MAX_CHARS`` characters."""
    everything = descendants(tree)
    literals = _assigned_literals(everything)
    found: dict[str, None] = {}
    for node in everything:
        for value in _compared(node, literals):
            if 0 < len(value) <= MAX_CHARS and len(found) < MAX_COMPARED:
                found.setdefault(value)
    return tuple(found)


def _assigned_literals(everything: list[nodes.Node]) -> dict[str, nodes.Expr]:
    """Variables set to a literal list, tuple or dict (``{% set pyjson = {'None': 'null'} %}``)."""
    found: dict[str, nodes.Expr] = {}
    for node in everything:
        if (
            isinstance(node, nodes.Assign)
            and isinstance(node.target, nodes.Name)
            and isinstance(node.node, nodes.List | nodes.Tuple | nodes.Dict)
        ):
            found[node.target.name] = node.node
    return found


def _literal(node: nodes.Node, literals: dict[str, nodes.Expr]) -> nodes.Expr | None:
    if isinstance(node, nodes.List | nodes.Tuple | nodes.Dict):
        return node
    if isinstance(node, nodes.Name):
        return literals.get(node.name)
    return None


def _strings(node: nodes.Node) -> Iterator[str]:
    """Every string constant a literal holds, nested ones too."""
    for const in [node, *descendants(node)]:
        if isinstance(const, nodes.Const) and type(const.value) is str:
            yield const.value


def _constant(node: nodes.Node) -> str | None:
    return node.value if isinstance(node, nodes.Const) and type(node.value) is str else None


def _is_format_key(node: nodes.Node) -> bool:
    """``message.role``, ``part['type']``: a read of a key whose values are the format's own names."""
    if isinstance(node, nodes.Filter):  # ``m.role|lower``
        return node.node is not None and _is_format_key(node.node)
    if isinstance(node, nodes.Getattr):
        return node.attr in _FORMAT_KEYS
    if isinstance(node, nodes.Getitem):
        return _constant(node.arg) in _FORMAT_KEYS
    return False


def _compared(node: nodes.Node, literals: dict[str, nodes.Expr]) -> Iterator[str]:
    if isinstance(node, nodes.Compare) and len(node.ops) == 1:
        left, op = node.expr, node.ops[0]
        right = op.expr
        if op.op in ("eq", "ne"):
            for const, other in ((left, right), (right, left)):
                value = _constant(const)
                if value is not None and _constant(other) is None and not _is_format_key(other):
                    yield value
        elif op.op in ("in", "notin") and _constant(left) is None and not _is_format_key(left):
            literal = _literal(right, literals)
            if isinstance(literal, nodes.List | nodes.Tuple):
                yield from (v for item in literal.items if (v := _constant(item)) is not None)
    elif isinstance(node, nodes.Test) and node.name in _EQUAL_TESTS and node.args:
        value = _constant(node.args[0])
        if value is not None and not _is_format_key(node.node):
            yield value
    elif isinstance(node, nodes.Getitem) and _constant(node.arg) is None:
        literal = _literal(node.node, literals)
        if isinstance(literal, nodes.Dict):  # ``{'None': 'null'}[c]``
            yield from (v for pair in literal.items if (v := _constant(pair.key)) is not None)
    elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr == "get":
        literal = _literal(node.node.node, literals)  # ``{'None': 'null'}.get(c, c)``
        if isinstance(literal, nodes.Dict) and node.args and _constant(node.args[0]) is None:
            yield from (v for pair in literal.items if (v := _constant(pair.key)) is not None)
    elif isinstance(node, nodes.Filter) and node.name in _FILTERS and node.node is not None:
        tests = [_constant(a) for a in node.args]
        if not any(t in _EQUAL_TESTS for t in tests) or (node.name.endswith("attr") and tests[0] in _FORMAT_KEYS):
            return
        at = next(k for k, t in enumerate(tests) if t in _EQUAL_TESTS)
        compared_with = node.args[at + 1 :]
        literal = _literal(node.node, literals)
        if literal is not None and any(_constant(a) is None for a in compared_with):  # a literal's items against c
            yield from _strings(literal)
        else:  # ``messages|selectattr('content', 'equalto', 'None')``
            yield from (v for a in compared_with if (v := _constant(a)) is not None)
