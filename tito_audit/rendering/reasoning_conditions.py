"""Where a chat template decides, by a turn's position, whether to render its reasoning: the reasoning ``if``s
directly inside the message-rendering loop and the atoms of their tests, read statically (no render).

``tito-audit fix`` patches these conditions (``tito_audit.fix.reasoning``); the formats point a history-rewrite
finding at the line of the first one (``tito_audit.formats.template_lines``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tito_audit.rendering.message_loop import rendering_loops
from tito_audit.rendering.template_conditions import BoolExpr, atoms, parse_bool
from tito_audit.rendering.template_source import Block, Branch, Node, Source, block_tags

_WORDS = ("think", "reason")


def _mentions_reasoning(block: Block) -> bool:
    return any(
        t.kind in ("string", "name") and any(w in t.value.lower() for w in _WORDS)
        for tag in block_tags(block)
        for t in tag.toks
    )


def _role_is_assistant(src: Source, expr: BoolExpr) -> bool:
    """The test has a top-level conjunct ``<message>.role == 'assistant'``."""
    kids = expr.kids if expr.op == "and" else [expr]
    for kid in kids:
        if kid.op != "atom":
            continue
        text = src.span_text(kid.toks).replace(" ", "")
        if ("role']==" in text or 'role"]==' in text or ".role==" in text) and "assistant" in text:
            return True
    return False


@dataclass
class Candidate:
    block: Block
    branch: Branch
    expr: BoolExpr
    atom: BoolExpr
    assistant_test: bool


def candidates(src: Source) -> list[Candidate]:
    """Atoms of the tests of reasoning ``if``s directly inside the message-rendering loop."""
    mains = rendering_loops(src)
    out: list[Candidate] = []

    def visit(nodes: list[Node], main: bool) -> None:
        for node in nodes:
            if not isinstance(node, Block):
                continue
            if node.keyword == "for":
                for br in node.branches:
                    visit(br.body, node in mains)
                continue
            if node.keyword == "if" and main and _mentions_reasoning(node):
                for br in node.branches:
                    if br.tag.keyword in ("if", "elif") and br.tag.expr:
                        expr = parse_bool(br.tag.expr)
                        for atom in atoms(expr):
                            out.append(Candidate(node, br, expr, atom, _role_is_assistant(src, expr)))
            for br in node.branches:
                visit(br.body, main)

    visit(src.tree, False)
    return out


# Atoms that change value for a turn once messages follow it (read statically; the patch measures it).
POSITIONAL = re.compile(r"\bloop\.(last|index0?|revindex0?|length)\b|last_\w*index")


def positional_reasoning_conditions(text: str) -> list[tuple[int, str]]:
    """``(line, condition)`` of each reasoning ``if`` in the message loop whose test reads the turn's position
    (``loop.last``, ``loop.index0 > ns.last_query_index``): where a template decides to drop earlier reasoning.
    Static (no render); empty when the template does not parse."""
    try:
        src = Source(text)
    except Exception:
        return []
    found: dict[int, str] = {}
    for cand in candidates(src):
        atom = src.span_text(cand.atom.toks)
        if POSITIONAL.search(atom):
            found.setdefault(src.line(cand.branch.tag.start), atom)
    return sorted(found.items())
