"""What a message-loop body prints and decides for an assistant message, known without running the template.

The marker walk follows the loop as it runs for an assistant turn. Where it meets an output or a test it asks
this view: a literal's text, a special-token variable's value (``{{ eos_token }}``), the role itself, or a
condition that depends on the role alone. Anything else is unknown (None), and the walk refuses rather than
guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tito_audit.rendering.message_loop import loop_target
from tito_audit.rendering.template_conditions import parse_expr
from tito_audit.rendering.template_source import (
    Block,
    Data,
    Leaf,
    Node,
    PatchError,
    Source,
    Tag,
    Tok,
    block_tags,
    literal_of,
)

_OTHER_ROLES = ("user", "system", "tool", "developer", "function", "ipython")


class AssistantView:
    """The loop variable's names, the stop texts, and the variables whose text is known (``set`` literals and
    the tokenizer's special tokens), updated as the walk passes ``set`` tags."""

    def __init__(self, src: Source, loop: Block, stops: Sequence[str], known: dict[str, str]) -> None:
        self.src = src
        self.stops = [s for s in stops if s]
        self.known = dict(known)
        self.names = set(loop_target(loop))

    def _is_role(self, e: Any) -> bool:
        from jinja2 import nodes

        if isinstance(e, nodes.Getattr) and isinstance(e.node, nodes.Name):
            return e.node.name in self.names and e.attr == "role"
        if isinstance(e, nodes.Getitem) and isinstance(e.node, nodes.Name) and isinstance(e.arg, nodes.Const):
            return e.node.name in self.names and e.arg.value == "role"
        return False

    def value(self, toks: Sequence[Tok]) -> str | None:
        """The text an operand prints for an assistant message, when it is known without running anything."""
        lit = literal_of(toks)
        if lit is not None:
            return lit
        if len(toks) == 1 and toks[0].kind == "name" and toks[0].value in self.known:
            return self.known[toks[0].value]
        try:
            e = parse_expr(self.src.span_text(toks))
        except PatchError:
            return None
        return "assistant" if self._is_role(e) else None

    def decide(self, toks: Sequence[Tok], role: str = "assistant") -> bool | None:
        """A test's value when it only depends on the message role."""
        from jinja2 import nodes

        try:
            e = parse_expr(self.src.span_text(toks))
        except PatchError:
            return None

        def ev(n: Any) -> bool | None:
            if isinstance(n, nodes.And):
                a, b = ev(n.left), ev(n.right)
                return False if a is False or b is False else (True if a and b else None)
            if isinstance(n, nodes.Or):
                a, b = ev(n.left), ev(n.right)
                return True if a or b else (False if a is False and b is False else None)
            if isinstance(n, nodes.Not):
                v = ev(n.node)
                return None if v is None else not v
            if isinstance(n, nodes.Compare) and len(n.ops) == 1 and self._is_role(n.expr):
                rhs, op = n.ops[0].expr, n.ops[0].op
                if isinstance(rhs, nodes.Const) and op in ("eq", "ne"):
                    return (rhs.value == role) == (op == "eq")
                if isinstance(rhs, nodes.List | nodes.Tuple) and all(isinstance(i, nodes.Const) for i in rhs.items):
                    inside = role in [getattr(i, "value", None) for i in rhs.items]
                    return inside if op == "in" else (not inside if op == "notin" else None)
            return None

        return ev(e)

    def assistant_only(self, toks: Sequence[Tok]) -> bool:
        return self.decide(toks) is True and all(self.decide(toks, r) is False for r in _OTHER_ROLES)

    def contains_stop(self, node: Node) -> bool:
        if isinstance(node, Data):
            return any(s in self.src.text[node.start : node.end] for s in self.stops)
        for tag in block_tags(node):
            for t in tag.toks:
                text = (
                    literal_of([t]) if t.kind == "string" else self.known.get(t.value, "") if t.kind == "name" else ""
                )
                if text and any(s in text for s in self.stops):
                    return True
        return False

    # -- insertion points ----------------------------------------------------------------------------------

    def track_set(self, tag: Tag) -> None:
        toks = tag.expr
        if len(toks) >= 3 and toks[0].kind == "name" and toks[1].value == "=":
            value = literal_of(toks[2:])
            if value is not None:
                self.known[toks[0].value] = value
            else:
                self.known.pop(toks[0].value, None)

    def track_branch_sets(self, node: Block) -> None:
        """``{% if role == 'assistant' %}{% set role = 'model' %}{% else %}...``: follow the taken branch."""
        uncertain = False
        for br in node.branches:
            decided = self.decide(br.tag.expr) if br.tag.keyword != "else" else True
            if decided is False:
                continue
            sets = [n.tag for n in br.body if isinstance(n, Leaf) and n.tag.keyword == "set"]
            for tag in sets:
                if decided is True and not uncertain:
                    self.track_set(tag)
                elif tag.expr:
                    self.known.pop(tag.expr[0].value, None)
            if decided is True and not uncertain:
                return
            uncertain = True
