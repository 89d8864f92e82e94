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

from tito_audit.fix.patch import AuditedTemplate, Patch, Skip
from tito_audit.rendering.reasoning_conditions import Candidate, candidates
from tito_audit.rendering.template_conditions import fold
from tito_audit.rendering.template_source import Edit, Source, apply_edits
from tito_audit.rollout.probes import REASONING_PROBES

ID = "reasoning_history"
_CHECKS = ("tool_append_prefix", "append_matrix", "history_rewrite")


def _sentinels(text: str) -> list[tuple[int, bool]]:
    return [(int(i), v == "T") for i, v in re.findall(r"\x02(\d+):([TF])\x03", text)]


def _atom_values(audited: AuditedTemplate, src: Source, cand: Candidate) -> tuple[bool | None, bool]:
    """(value of the atom for the turn being generated, whether the value moves when messages follow),
    measured by rendering probe conversations with the atom printed just before its ``if``.
    Also False for "moves" when the ``if`` is reached by other roles without an assistant-role test."""
    from tito_audit.errors import RenderError
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.rollout.probes import TOOLS

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
    by_branch: dict[int, Candidate] = {}
    for cand in candidates(src):
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
