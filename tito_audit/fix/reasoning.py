"""Patch (a): keep each assistant turn's reasoning block as it was rendered when the turn was generated.

Templates like Qwen3's emit the think block only for the last message (``loop.last``) or for turns after the
last user query (``loop.index0 > ns.last_query_index``), and drop an empty one from earlier turns. A turn
then renders differently as soon as a tool result or a user message is appended, so no token delta exists.

The rewrite finds, in the loop that renders the messages, every ``if`` that decides about reasoning text
(its branches mention ``think``/``reason``) on the turn's position, and fixes each positional atom to the
value it has for the turn being generated (the last message, after the last query). Every turn then renders
the way the model saw it while sampling; inference renders, where that turn is the last one, do not change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tito_audit.fix.conditions import BoolExpr, atoms, fold, parse_bool
from tito_audit.fix.message_loop import rendering_loops
from tito_audit.fix.patch import AuditedTemplate, Patch, Skip
from tito_audit.fix.source import Block, Branch, Edit, Node, Source, apply_edits, block_tags
from tito_audit.probes import REASONING_PROBES

ID = "reasoning_history"
_WORDS = ("think", "reason")
_CHECKS = ("tool_append_prefix", "append_matrix", "history_rewrite")


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
class _Candidate:
    block: Block
    branch: Branch
    expr: BoolExpr
    atom: BoolExpr
    assistant_test: bool


def _candidates(src: Source) -> list[_Candidate]:
    """Atoms of the tests of reasoning ``if``s directly inside the message-rendering loop."""
    mains = rendering_loops(src)
    out: list[_Candidate] = []

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
                            out.append(_Candidate(node, br, expr, atom, _role_is_assistant(src, expr)))
            for br in node.branches:
                visit(br.body, main)

    visit(src.tree, False)
    return out


# Atoms that change value for a turn once messages follow it (read statically; the patch measures it).
_POSITIONAL = re.compile(r"\bloop\.(last|index0?|revindex0?|length)\b|last_\w*index")


def positional_reasoning_conditions(text: str) -> list[tuple[int, str]]:
    """``(line, condition)`` of each reasoning ``if`` in the message loop whose test reads the turn's position
    (``loop.last``, ``loop.index0 > ns.last_query_index``): where a template decides to drop earlier reasoning.
    Static (no render); empty when the template does not parse."""
    try:
        src = Source(text)
    except Exception:
        return []
    found: dict[int, str] = {}
    for cand in _candidates(src):
        atom = src.span_text(cand.atom.toks)
        if _POSITIONAL.search(atom):
            found.setdefault(src.line(cand.branch.tag.start), atom)
    return sorted(found.items())


def _sentinels(text: str) -> list[tuple[int, bool]]:
    return [(int(i), v == "T") for i, v in re.findall(r"\x02(\d+):([TF])\x03", text)]


def _atom_values(audited: AuditedTemplate, src: Source, cand: _Candidate) -> tuple[bool | None, bool]:
    """(value of the atom for the turn being generated, whether the value moves when messages follow),
    measured by rendering probe conversations with the atom printed just before its ``if``.
    Also False for "moves" when the ``if`` is reached by other roles without an assistant-role test."""
    from tito_audit.errors import RenderError
    from tito_audit.probes import TOOLS
    from tito_audit.rendering.renderer import Renderer

    atom = src.span_text(cand.atom.toks)
    probe = "{{ '\\x02' ~ loop.index0 ~ ':' ~ ('T' if (" + atom + ") else 'F') ~ '\\x03' }}"
    at = cand.block.first_tag.start
    try:
        base = Renderer(
            audited.model.tokenizer,
            src.text[:at] + probe + src.text[at:],
            audited.options.template_kwargs,
            audited.options.date,
            audited.options.limits,
        )
    except Exception:
        return None, False
    last_values: set[bool] = set()
    moves = False
    for mode in audited.thinking_modes:
        renderer = base.with_kwargs(**mode) if mode else base
        for messages, appends in REASONING_PROBES:
            index = len(messages) - 1
            try:
                alone = dict(_sentinels(renderer.render(messages, tools=list(TOOLS))))
            except RenderError:
                continue
            if index not in alone:
                continue
            last_values.add(alone[index])
            for extra in appends:
                convo = [*messages, *extra]
                try:
                    seen = _sentinels(renderer.render(convo, tools=list(TOOLS)))
                except RenderError:
                    continue
                if not cand.assistant_test and any(convo[i]["role"] != "assistant" for i, _ in seen):
                    return None, False  # the if also decides other roles' rendering: not ours to fix
                followed = dict(seen)
                if index in followed and followed[index] != alone[index]:
                    moves = True
    if len(last_values) != 1:
        return None, moves
    return next(iter(last_values)), moves


def rewrite(audited: AuditedTemplate, src: Source) -> tuple[list[Edit], list[str]]:
    """Edits fixing positional reasoning conditions, and one line per rewritten condition."""
    values: dict[int, bool] = {}
    by_branch: dict[int, _Candidate] = {}
    for cand in _candidates(src):
        value, moves = _atom_values(audited, src, cand)
        if moves and value is not None:
            values[cand.atom.toks[0].start] = value
            by_branch[cand.branch.tag.start] = cand
    edits: list[Edit] = []
    changes: list[str] = []
    for cand in sorted(by_branch.values(), key=lambda c: c.branch.tag.start):
        tag = cand.branch.tag
        _, text = fold(src, cand.expr, values)
        old = src.span_text(tag.expr)
        edits.append(Edit(tag.expr[0].start, tag.expr[-1].end, text))
        changes.append(f"line {src.line(tag.start)}: `{tag.keyword} {old}` -> `{tag.keyword} {text}`")
    return edits, changes


def propose(audited: AuditedTemplate, src: Source) -> Patch | Skip:
    failing = [c for c in audited.report.checks if c.id in _CHECKS and c.active_findings]
    if not failing:
        return Skip(ID, "appends preserve the history: no reasoning condition to rewrite")
    edits, changes = rewrite(audited, src)
    if not edits:
        return Skip(
            ID,
            "no reasoning block in the message loop depends on the turn's position "
            f"({', '.join(c.id for c in failing)} fail for another reason)",
        )
    targets = tuple(c.id for c in failing)
    return Patch(
        id=ID,
        title="keep reasoning on every assistant turn",
        why="; ".join(f"{c.id}: {c.summary}" for c in failing),
        template=apply_edits(src.text, edits),
        changes=changes,
        targets=targets,
        required=any(c.id == "tool_append_prefix" and c.status == "fail" for c in failing),
    )
