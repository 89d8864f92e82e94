"""The keys a template reads from the values it is given, by name, read from its syntax tree.

A template may rewrite an earlier tool call's result where a later call repeats one of its argument values: the
older output of a file read again, of a command run again, of a page fetched again, replaced by a pointer to the
newer one (context management, as coding-agent harnesses do it). Red team 60 keyed that on ``file_path``,
``command`` and ``url``, each read as ``(tc.function|default(tc)).arguments.file_path`` and matched with
``selectattr('path', 'equalto', ...)``: no ``{% if %}`` arm, so template coverage could not name it, and no
conversation of the search repeated such a value in a later turn. Each was a clean SAFE.

``read_keys`` lists every name the template reads as a key: ``x.key``, ``x['key']``, ``x.get('key')``, and the
attribute a filter reads of every item (``selectattr('key')``, ``map(attribute='key')``, ``sort(attribute=...)``).
The search's sweep of repeated values (``audit.search.repeats``) calls tools with those keys as arguments and
repeats their values in later turns. A name that is the format's own (``role``, ``content``, ``tool_calls``,
``function``, ``arguments``...), a method of a string, a list or a dict, an attribute of jinja's ``loop`` or of a
``namespace()`` the template keeps its own state in (``ns.found``) is no argument a loop sends, and is left out.
"""

from __future__ import annotations

from jinja2 import nodes

from tito_audit.rendering.tree_order import descendants

MAX_KEYS = 16  # keys kept, in the order of the syntax tree (an outer filter before the one it is given)
MAX_CHARS = 40  # characters of a key kept (a longer constant is a text, not a key)
# The chat format's own keys: what every message, call and tool declaration already carries where it belongs
FORMAT_KEYS = frozenset(
    {
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "function",
        "arguments",
        "type",
        "id",
        "reasoning_content",
        "reasoning",
        "thinking",
        "parameters",
        "properties",
        "required",
        "description",
        "text",
    }
)
_LOOP = frozenset(
    {"index", "index0", "revindex", "revindex0", "first", "last", "length", "previtem", "nextitem", "depth", "depth0"}
)
_METHODS = frozenset(n for kind in (str, list, dict) for n in dir(kind))
_ATTRIBUTE_FILTERS = frozenset({"selectattr", "rejectattr"})  # their first argument is an attribute of each item
_ATTRIBUTE_KWARG = "attribute"  # ``map``, ``sort``, ``groupby``, ``unique``, ``sum``, ``min``, ``max``


def read_keys(tree: nodes.Template) -> tuple[str, ...]:
    """The names the template reads as keys (see the module docstring), each once, at most ``MAX_KEYS``."""
    everything = descendants(tree)
    own = _namespace_names(everything)
    found: dict[str, None] = {}
    for node in everything:
        for key in _keys(node):
            if key not in own and _is_argument_name(key) and len(found) < MAX_KEYS:
                found.setdefault(key)
    return tuple(found)


def _namespace_names(everything: list[nodes.Node]) -> frozenset[str]:
    """The attributes the template keeps its own state in: ``set ns.name = ...`` and ``namespace(name=...)``."""
    names = {node.attr for node in everything if isinstance(node, nodes.NSRef)}
    for node in everything:
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "namespace":
            names.update(kw.key for kw in node.kwargs)
    return frozenset(names)


def _keys(node: nodes.Node) -> list[str]:
    if isinstance(node, nodes.Getattr):
        return [node.attr]
    if isinstance(node, nodes.Getitem):
        return _constants([node.arg])
    if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr == "get":
        return _constants(node.args[:1])
    if isinstance(node, nodes.Filter | nodes.Test):
        read = _constants(node.args[:1]) if node.name in _ATTRIBUTE_FILTERS else []
        return read + _constants([kw.value for kw in node.kwargs if kw.key == _ATTRIBUTE_KWARG])
    return []


def _constants(values: list[nodes.Expr]) -> list[str]:
    return [v.value for v in values if isinstance(v, nodes.Const) and type(v.value) is str]


def _is_argument_name(key: str) -> bool:
    """A name a call's arguments may carry: an identifier-like key (``file_path``, ``maxResults``, ``sort-order``),
    not the format's own, a method or a loop attribute."""
    return (
        0 < len(key) <= MAX_CHARS
        and not key.startswith("_")
        and key.replace("-", "_").replace(".", "_").isidentifier()
        and key not in FORMAT_KEYS
        and key not in _LOOP
        and key not in _METHODS
    )
