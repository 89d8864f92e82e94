"""Patch (c): tool-call arguments given as a dict render as JSON (``tojson``), never as a Python repr.

Rollout code parses the model's call into a dict. A template that prints ``tool_call.arguments`` raw then
writes ``{'city': 'Paris', 'flag': True}`` (or raises when it concatenates the dict to a string), text no model
emits. Each such print becomes ``(args if args is string else args | tojson)``: string arguments still print
verbatim, dict arguments print as the JSON a model writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tito_audit.fix.patch import AuditedTemplate, Patch, Skip
from tito_audit.rendering.template_source import (
    Block,
    Edit,
    Leaf,
    Node,
    Source,
    Tok,
    apply_edits,
    chain_operands,
    top_level,
)

ID = "tool_arguments_json"


def _args_expr(toks: Sequence[Tok], aliases: set[str]) -> list[Tok] | None:
    """The arguments expression an operand prints raw (``x.arguments``, ``x['arguments']``, an alias)."""
    core = list(toks)
    if len(core) >= 3 and core[-2].value == "|" and core[-1].value == "string":
        core = core[:-2]
    if not core or any(t.kind == "operator" and t.value in ("|", "(") for _, t in top_level(core)):
        return None
    if len(core) == 1 and core[0].kind == "name" and core[0].value in aliases:
        return core
    last = core[-1]
    if len(core) >= 3 and last.kind == "name" and last.value == "arguments" and core[-2].value == ".":
        return core
    if len(core) >= 4 and last.value == "]" and core[-2].kind == "string" and core[-2].value[1:-1] == "arguments":
        return core
    return None


def rewrite(src: Source) -> tuple[list[Edit], list[str]]:
    aliases: set[str] = set()
    for tag in src.tags:
        toks = tag.expr
        if tag.keyword == "set" and len(toks) >= 3 and toks[1].value == "=" and _args_expr(toks[2:], set()):
            aliases.add(toks[0].value)
    edits: list[Edit] = []
    changes: list[str] = []

    def visit(nodes: Sequence[Node], guarded: bool) -> None:
        for node in nodes:
            if isinstance(node, Block):
                for br in node.branches:
                    test = src.span_text(br.tag.expr)
                    visit(br.body, guarded or ("is string" in test or "is mapping" in test))
                continue
            if not isinstance(node, Leaf) or node.tag.kind != "var" or guarded:
                continue
            for operand in chain_operands(node.tag.expr) or [list(node.tag.expr)]:
                expr = _args_expr(operand, aliases)
                if expr is None:
                    continue
                text = src.span_text(expr)
                new = f"({text} if {text} is string else {text} | tojson)"
                edits.append(Edit(operand[0].start, operand[-1].end, new))
                changes.append(f"line {src.line(node.tag.start)}: `{src.span_text(operand)}` -> `{new}`")

    visit(src.tree, False)
    return edits, changes


def dict_args_problem(audited: AuditedTemplate) -> str | None:
    """Render one tool call with dict and with JSON-string arguments: does the dict raise or print as repr?"""
    from tito_audit.errors import RenderError
    from tito_audit.rollout.probes import TOOLS

    renderer = audited.renderer(audited.model.chat_template)
    args = {"city": "Paris", "metric": True}

    def convo(content: str | None, arguments: object) -> list[dict[str, object]]:
        call = {"id": "call00001", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
        return [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": content, "tool_calls": [call]},
        ]

    for content in ("", None):
        try:
            as_string = renderer.render(convo(content, json.dumps(args)), tools=list(TOOLS))
        except RenderError:
            continue
        try:
            as_dict = renderer.render(convo(content, args), tools=list(TOOLS))
        except RenderError as exc:
            return f"dict arguments make the template raise ({exc.message}); JSON strings render"
        if "{'city'" in as_dict and "{'city'" not in as_string:
            return "dict arguments render as a Python repr (single quotes, True)"
    return None


def propose(audited: AuditedTemplate, src: Source) -> Patch | Skip:
    problem = dict_args_problem(audited)
    if problem is None:
        return Skip(ID, "dict arguments render as JSON")
    edits, changes = rewrite(src)
    if not edits:
        return Skip(ID, f"{problem}, but no raw print of the arguments outside a string test was found")
    check = next((c for c in audited.report.checks if c.id == "tool_call_serialization"), None)
    repr_leak = "repr" in problem
    return Patch(
        id=ID,
        title="print dict tool-call arguments with tojson",
        why=problem,
        template=apply_edits(src.text, edits),
        changes=changes,
        targets=("tool_call_serialization",) if repr_leak and check and check.active_findings else ("tool_support",),
        required=False,
        changes_inference=True,
        caveats=[
            "a tool call with dict arguments now renders as JSON instead of "
            + ("a Python repr" if repr_leak else "raising")
            + ": the text a model emits, but not what this template showed before"
        ],
    )
