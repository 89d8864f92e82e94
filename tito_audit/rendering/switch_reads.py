"""The switches a template reads from its context: variables it compares against values, read from its syntax tree.

A template reads more than its messages: ``reasoning_effort == 'low'``, ``enable_thinking is false``,
``builtin_tools is defined``, ``if compact_history``. Each such variable changes what the template writes, and
an audit that never passes it plays only the template's default. So every variable the template tests is read
here with the values it is tested against, from its code (never from a list of names):

- compared with constants (``x == 'low'``, ``x != 'high'``, ``x in ['low', 'medium']``, ``x|lower == 'low'``,
  ``x is sameas false``, ``x is equalto 2``): those constants;
- tested for truth or definedness (``if x``, ``not x``, ``x is defined``, ``x is true``, ``x is none``):
  ``True`` and ``False`` (``None`` where it is tested for it).

A name the template sets itself (``{% set content = message.content %}``, a loop variable, a macro parameter) is
no switch, unless it sets it only where it is undefined (``{% if x is not defined %}{% set x = 'medium' %}``: a
default the caller overrides). Whether a name is a context variable at all is the caller's to decide: it holds the
template's undeclared variables (``analysis.template_variables``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from jinja2 import nodes

from tito_audit.rendering.tree_order import descendants

# Tests that compare the variable with their argument, and those that read its truth or definedness.
_VALUE_TESTS = frozenset({"sameas", "equalto", "eq", "=="})
_TRUTH_TESTS = frozenset({"defined", "undefined", "true", "false", "boolean", "none", "string", "mapping"})
_COMPARE_OPS = frozenset({"eq", "ne", "in", "notin"})
_SCALARS = (str, int, float, bool, type(None))
_READ = (nodes.Compare, nodes.Test, nodes.If, nodes.CondExpr, nodes.Not, nodes.And, nodes.Or)  # what is read
MAX_VALUES = 8  # values kept per switch (a template compares a handful)


def read_switches(
    tree: nodes.Template, everything: list[nodes.Node] | None = None
) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """``(name, values)`` for every variable the template compares or tests, in the order it first does, each
    value once (with its type: ``True`` and ``1`` are two values). ``everything``: the tree's ``descendants``
    where the caller has them."""
    found: dict[str, dict[tuple[str, Any], Any]] = {}

    def add(name: str, values: Iterable[Any]) -> None:
        seen = found.setdefault(name, {})
        for value in values:
            if len(seen) < MAX_VALUES:
                seen.setdefault((type(value).__name__, value), value)

    for node in descendants(tree) if everything is None else everything:
        if not isinstance(node, _READ):
            continue
        if isinstance(node, nodes.Compare):
            _compare(node, add)
        elif isinstance(node, nodes.Test):
            name = _switch_name(node.node)
            if name is None:
                continue
            if node.name in _VALUE_TESTS and node.args:
                add(name, _constants(node.args[0]))
            elif node.name in _TRUTH_TESTS:
                add(name, (None,) if node.name == "none" else (True, False))
        else:
            for test in _tested(node):
                name = test.name if isinstance(test, nodes.Name) and test.ctx == "load" else None
                if name is not None:
                    add(name, (True, False))
    own = _set_unguarded(tree)
    return tuple((name, tuple(values.values())) for name, values in found.items() if values and name not in own)


def _set_unguarded(tree: nodes.Node) -> set[str]:
    """Names the template binds (``set``, loop targets, macro parameters) other than where an enclosing ``if``
    tests their definedness (a default)."""
    out: set[str] = set()

    def walk(node: nodes.Node, guarded: frozenset[str]) -> None:
        if isinstance(node, nodes.Assign | nodes.AssignBlock | nodes.For):
            out.update(n for n in _bound(node.target) if n not in guarded)
        elif isinstance(node, nodes.Macro | nodes.CallBlock):
            out.update(a.name for a in node.args)
        if isinstance(node, nodes.If):
            inner = guarded | _defined_tested(node.test)
            for child in (*node.body, *node.elif_, *node.else_):
                walk(child, inner)
            return
        for child in node.iter_child_nodes():
            walk(child, guarded)

    walk(tree, frozenset())
    return out


def _bound(target: nodes.Node) -> list[str]:
    if isinstance(target, nodes.Name):
        return [target.name]
    if isinstance(target, nodes.Tuple):
        return [n.name for n in target.items if isinstance(n, nodes.Name)]
    return []


def _defined_tested(test: nodes.Node) -> frozenset[str]:
    """The names whose definedness ``test`` reads (``x is defined``, ``x is not defined``)."""
    return frozenset(
        t.node.name
        for t in [test, *test.find_all(nodes.Test)]
        if isinstance(t, nodes.Test) and t.name in ("defined", "undefined") and isinstance(t.node, nodes.Name)
    )


def _compare(node: nodes.Compare, add: Any) -> None:
    sides = [node.expr, *(op.expr for op in node.ops)]
    if not all(op.op in _COMPARE_OPS for op in node.ops):
        return
    for i, side in enumerate(sides):
        name = _switch_name(side)
        if name is None:
            continue
        others = sides[:i] + sides[i + 1 :]
        add(name, (v for other in others for v in _constants(other)))


def _tested(node: nodes.Node) -> Iterator[nodes.Node]:
    """The expressions ``node`` reads for their truth: an ``if``'s test, a ``not``'s operand, either side of
    ``and``/``or``."""
    if isinstance(node, nodes.If | nodes.CondExpr):
        if node.test is not None:
            yield node.test
    elif isinstance(node, nodes.Not):
        yield node.node
    elif isinstance(node, nodes.And | nodes.Or):
        yield node.left
        yield node.right


def _switch_name(node: nodes.Node) -> str | None:
    """The variable ``node`` reads, through filters and string methods applied to it (``x|lower``,
    ``x.strip()``); None when it reads anything else."""
    while True:
        if isinstance(node, nodes.Name):
            return node.name if node.ctx == "load" else None
        if isinstance(node, nodes.Filter) and node.node is not None:
            node = node.node
        elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and not node.args:
            node = node.node.node
        else:
            return None


def _constants(node: nodes.Node) -> Iterator[Any]:
    """The scalar constants ``node`` is (a constant, or a list or tuple of them)."""
    if isinstance(node, nodes.Const) and isinstance(node.value, _SCALARS):
        yield node.value
    elif isinstance(node, nodes.List | nodes.Tuple):
        for item in node.items:
            if isinstance(item, nodes.Const) and isinstance(item.value, _SCALARS):
                yield item.value
