"""The DeepSeek-V3 class: tool calls are rendered only when ``content is none``, dropped when it is ``""``.

Engines and parsers return ``content: ""`` next to tool calls as often as ``None``; such a template then
renders an empty answer instead of the call. The principled rewrite treats an empty string next to tool
calls as no content: ``c is none`` becomes ``(c is none or (c == '' and m.tool_calls))`` and
``c is not none`` its negation. It changes what the template renders for those turns (the call appears), so
it is offered only when the proof shows no check regresses, and flagged.
"""

from __future__ import annotations

from typing import Any

from tito_audit.fix.patch import AuditedTemplate, Patch, Skip
from tito_audit.rendering.message_loop import loop_target, rendering_loops
from tito_audit.rendering.template_conditions import atoms, parse_bool, parse_expr
from tito_audit.rendering.template_source import Block, Edit, PatchError, Source, apply_edits, block_tags, walk

ID = "empty_content_tool_calls"


def _content_test(e: Any, names: set[str]) -> bool | None:
    """True for ``<msg>.content is none``, False for ``... is not none``, None otherwise."""
    from jinja2 import nodes

    negated = isinstance(e, nodes.Not)
    inner = getattr(e, "node", None) if negated else e
    if not (isinstance(inner, nodes.Test) and inner.name == "none"):
        return None
    target: Any = inner.node
    if isinstance(target, nodes.Getattr):
        field = target.attr
    elif isinstance(target, nodes.Getitem) and isinstance(target.arg, nodes.Const):
        field = target.arg.value
    else:
        return None
    owner = getattr(target.node, "name", None)
    if field != "content" or not isinstance(owner, str) or owner not in names:
        return None
    return not negated


def rewrite(src: Source) -> tuple[list[Edit], list[str]]:
    """Rewrite every ``content is (not) none`` test of the message loop, when one of them gates tool calls."""
    edits: list[Edit] = []
    changes: list[str] = []
    for loop in rendering_loops(src):
        names = set(loop_target(loop))
        if not names:
            continue
        name = next(iter(names))
        calls = f"{name}['tool_calls']" if f"{name}['tool_calls']" in src.text else f"{name}.tool_calls"
        found: list[tuple[int, int, str, str, bool]] = []  # (start, end, text, subject, is_none), gates calls
        gates_calls = False
        for node in walk([loop]):
            if not isinstance(node, Block) or node.keyword != "if":
                continue
            mentions_calls = any(t.value.strip("'\"") == "tool_calls" for tag in block_tags(node) for t in tag.toks)
            for br in node.branches:
                if br.tag.keyword not in ("if", "elif") or not br.tag.expr:
                    continue
                for atom in atoms(parse_bool(br.tag.expr)):
                    text = src.span_text(atom.toks)
                    try:
                        kind = _content_test(parse_expr(text), names)
                    except PatchError:
                        kind = None
                    if kind is None:
                        continue
                    gates_calls |= mentions_calls
                    subject = text.split(" is ")[0].strip()
                    found.append((atom.toks[0].start, atom.toks[-1].end, text, subject, kind))
        if not gates_calls:
            continue
        for start, end, text, subject, is_none in found:
            empty_call = f"({subject} == '' and {calls})"
            new = f"({text} or {empty_call})" if is_none else f"({text} and not {empty_call})"
            edits.append(Edit(start, end, new))
            changes.append(f"line {src.line(start)}: `{text}` -> `{new}`")
    return edits, changes


def propose(audited: AuditedTemplate, src: Source) -> Patch | Skip:
    check = next((c for c in audited.report.checks if c.id == "tool_support"), None)
    dropped = [f for f in (check.active_findings if check else []) if "not rendered" in f.message]
    if not dropped:
        return Skip(ID, "tool calls render next to empty content")
    edits, changes = rewrite(src)
    if not edits:
        return Skip(ID, "tool calls are dropped, but not by a `content is none` test in the message loop")
    return Patch(
        id=ID,
        title="render tool calls when content is an empty string",
        why=f"tool_support: {dropped[0].message}",
        template=apply_edits(src.text, edits),
        changes=changes,
        targets=("tool_support",),
        required=audited.report.verdict == "unsafe",
        changes_inference=True,
        caveats=["a turn with content '' and tool calls now renders its calls (before: an empty answer)"],
    )
