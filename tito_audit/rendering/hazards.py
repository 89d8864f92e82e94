"""Static reading of a template's code for hostile or non-reproducible constructs.

The sandbox refuses unsafe attribute access at render time, but jinja folds constant expressions at
compile time (``{{ ''.__class__ }}`` becomes a silent undefined before any render), and a branch a
scenario never takes is never rendered. So the template's syntax tree is also read: every attribute, item,
``|attr`` and format-string that reaches for private or internal attributes is a security finding, whether
or not a render tripped on it. The template is parsed once for this and every other reading of its code
(``analysis.template_facts``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import (
    UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
    UNSAFE_COROUTINE_ATTRIBUTES,
    UNSAFE_GENERATOR_ATTRIBUTES,
)

_INTERNAL = (
    {
        "mro",
        "func_globals",
        "func_code",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "tb_frame",
        "co_code",
        "im_func",
        "im_self",
        "gi_yieldfrom",
    }
    | set(UNSAFE_GENERATOR_ATTRIBUTES)
    | set(UNSAFE_COROUTINE_ATTRIBUTES)
    | set(UNSAFE_ASYNC_GENERATOR_ATTRIBUTES)
)
# A format field that walks attributes or items: "{0.__class__}", "{x[__globals__]}".
_FORMAT_FIELD = re.compile(r"\{[^{}]*[.\[]_[^{}]*\}")
_ENV_NAMES = {
    "environ",
    "getenv",
    "os",
    "sys",
    "subprocess",
    "builtins",
    "__builtins__",
    "env",
    "environment",
}
_DATE_NAMES = {"strftime_now", "now", "today", "utcnow", "date_string", "current_date"}
_RANDOM_FILTERS = {"random", "shuffle"}


@dataclass(frozen=True)
class Hazard:
    kind: str  # "security" | "reads_date" | "reads_environment" | "nondeterministic"
    detail: str
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "line": self.line}


def _unsafe_name(name: str) -> bool:
    return name.startswith("_") or name in _INTERNAL


def find_hazards(found_nodes: Iterable[nodes.Node]) -> list[Hazard]:
    """Hazards among a template's nodes (``analysis.ANALYSED_NODES``, in tree order), read before jinja's compiler
    folds constants in the tree (``analysis``)."""
    found: list[Hazard] = []

    def add(kind: str, detail: str, node: nodes.Node) -> None:
        found.append(Hazard(kind, detail, getattr(node, "lineno", None)))

    for node in found_nodes:
        if isinstance(node, nodes.Getattr) and _unsafe_name(node.attr):
            add("security", f"access to internal attribute {node.attr!r}", node)
        elif (
            isinstance(node, nodes.Getitem)
            and isinstance(node.arg, nodes.Const)
            and isinstance(node.arg.value, str)
            and _unsafe_name(node.arg.value)
        ):
            add("security", f"item access to internal attribute {node.arg.value!r}", node)
        elif isinstance(node, nodes.Filter):
            if (
                node.name == "attr"
                and node.args
                and isinstance(node.args[0], nodes.Const)
                and isinstance(node.args[0].value, str)
                and _unsafe_name(node.args[0].value)
            ):
                add("security", f"|attr({node.args[0].value!r}) reaches an internal attribute", node)
            elif node.name in _RANDOM_FILTERS:
                add("nondeterministic", f"|{node.name} filter gives a different render per call", node)
        elif (
            isinstance(node, nodes.Call)
            and isinstance(node.node, nodes.Getattr)
            and node.node.attr in ("format", "format_map")
        ):
            add(
                "security" if _format_walks(node.node.node) else "format_call",
                f"str.{node.node.attr}() call"
                + (" walks internal attributes" if _format_walks(node.node.node) else ""),
                node,
            )
        elif isinstance(node, nodes.Name) and node.ctx == "load":
            if node.name in _DATE_NAMES:
                add("reads_date", f"uses {node.name!r}: output depends on the date", node)
            elif node.name in _ENV_NAMES:
                add("reads_environment", f"reads {node.name!r} from the render context", node)
        elif isinstance(node, nodes.Const) and isinstance(node.value, str) and _FORMAT_FIELD.search(node.value):
            add("security", f"format string {node.value[:40]!r} walks internal attributes", node)
    return [h for h in found if h.kind != "format_call"]


def _format_walks(target: nodes.Node) -> bool:
    return (
        isinstance(target, nodes.Const) and isinstance(target.value, str) and bool(_FORMAT_FIELD.search(target.value))
    )
