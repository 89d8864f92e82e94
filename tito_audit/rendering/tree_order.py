"""Every node of a jinja syntax tree, in the order ``find_all`` yields them, from one walk.

Reading a template's facts asks its tree for several kinds of node (``analysis.read_tree``, ``message_reads``,
``switch_reads``), and jinja's ``find_all`` is a recursive generator: each node it finds is handed up through one
generator per level above it, and each reading walked the whole tree again. One iterative walk here lists the
nodes once, in ``find_all``'s order (depth first, a node before its children, the children in field order); each
reading keeps the kinds it wants from that list. ``tests/rendering/test_template_analysis.py`` holds the list to
``find_all``'s.
"""

from __future__ import annotations

from jinja2 import nodes


def descendants(tree: nodes.Node) -> list[nodes.Node]:
    """The nodes below ``tree`` (not ``tree`` itself), as ``tree.find_all(nodes.Node)`` yields them."""
    out: list[nodes.Node] = []
    stack = list(tree.iter_child_nodes())
    stack.reverse()
    while stack:
        node = stack.pop()
        out.append(node)
        children = list(node.iter_child_nodes())
        children.reverse()
        stack.extend(children)
    return out
