"""What every patch class shares: the patch record, the message loop, and a small boolean-expression view.

A patch is a list of edits of the template text plus the checks it is meant to fix. Patch classes find
their constructs in the template's structure (``source.Source``), never by model name.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tito_audit.fix.source import Block, Leaf, PatchError, Source, Tok, environment, top_level, walk

if TYPE_CHECKING:
    from tito_audit.audit import ModelReport
    from tito_audit.context import AuditOptions
    from tito_audit.sources.load import LoadedModel


@dataclass
class FixContext:
    """The model, the options and the audit of its original template: what every patch class decides on."""

    model: LoadedModel
    options: AuditOptions
    report: ModelReport
    stop_ids: tuple[int, ...]
    thinking_modes: list[dict[str, Any]]

    @property
    def stop_texts(self) -> list[str]:
        tok = self.model.tokenizer
        return [t for t in (tok.decode([i], skip_special_tokens=False) for i in self.stop_ids) if t]

    def renderer(self, template: str) -> Any:
        from tito_audit.rendering.renderer import Renderer

        o = self.options
        return Renderer(self.model.tokenizer, template, o.template_kwargs, o.date, o.limits)


@dataclass
class Patch:
    """One rewrite of the template, before it is proven."""

    id: str  # "reasoning_history" | "generation_markers" | "tool_arguments_json" | "empty_content_tool_calls"
    title: str
    why: str  # the audit finding(s) it answers
    template: str  # the template text with this patch applied
    changes: list[str]  # one line per rewritten construct, with its template line
    targets: tuple[str, ...]  # checks it must improve; the first must pass
    required: bool  # True when it answers a failing error-severity check (the verdict depends on it)
    changes_inference: bool = False  # declared up front: renders of inference conversations may change
    caveats: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "why": self.why,
            "changes": self.changes,
            "targets": list(self.targets),
            "required": self.required,
            "changes_inference": self.changes_inference,
            "caveats": self.caveats,
        }


@dataclass
class Skip:
    """A patch class that does not apply, or cannot be built for this template, and why."""

    id: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "reason": self.reason}


def has_output(block: Block) -> bool:
    return any(isinstance(node, Leaf) and node.tag.kind == "var" for node in walk([block]))


def message_loops(src: Source) -> list[Block]:
    """``for`` loops over the conversation: ``for message in messages``, ``for i in range(messages|length)``,
    or over a variable set from the messages (``loop_messages = messages[1:]``)."""
    aliases = {"messages"}
    for tag in src.tags:  # in source order, so chains of aliases resolve
        toks = tag.expr
        is_set = tag.keyword == "set" and len(toks) >= 3 and toks[0].kind == "name" and toks[1].value == "="
        if is_set and any(t.kind == "name" and t.value in aliases for t in toks[2:]):
            aliases.add(toks[0].value)
    loops = []
    for node in walk(src.tree):
        if isinstance(node, Block) and node.keyword == "for":
            expr = node.first_tag.expr
            at_in = next((i for i, t in top_level(expr) if t.kind == "name" and t.value == "in"), None)
            if at_in is not None and any(t.kind == "name" and t.value in aliases for t in expr[at_in + 1 :]):
                loops.append(node)
    return loops


def rendering_loops(src: Source) -> list[Block]:
    """Message loops that render something (the main loop); pre-scan loops only compute state."""
    return [b for b in message_loops(src) if has_output(b)]


def loop_target(block: Block) -> list[str]:
    expr = block.first_tag.expr
    names = []
    for _, t in top_level(expr):
        if t.kind == "name" and t.value == "in":
            break
        if t.kind == "name":
            names.append(t.value)
    return names


def parse_expr(text: str) -> Any:
    """Jinja's own AST of one expression (nodes.Expr)."""
    from jinja2 import TemplateSyntaxError

    try:
        tree = environment().parse("{{ " + text + " }}")
    except TemplateSyntaxError as exc:
        raise PatchError(f"cannot parse expression {text[:60]!r}: {exc}") from exc
    return tree.body[0].nodes[0]


@dataclass
class BoolExpr:
    """``a or b``, ``a and b``, ``not a`` over atoms, with each atom's tokens (so its text can be kept)."""

    op: str  # "or" | "and" | "not" | "atom"
    kids: list[BoolExpr] = field(default_factory=list)
    toks: list[Tok] = field(default_factory=list)


def _split(toks: list[Tok], word: str) -> list[list[Tok]]:
    parts: list[list[Tok]] = [[]]
    tops = {j for j, _ in top_level(toks)}
    for i, t in enumerate(toks):
        if t.kind == "name" and t.value == word and i in tops:
            parts.append([])
        else:
            parts[-1].append(t)
    return parts


def _wrapped(toks: list[Tok]) -> bool:
    if len(toks) < 2 or toks[0].value != "(" or toks[-1].value != ")":
        return False
    depth = 0
    for i, t in enumerate(toks):
        if t.kind == "operator" and t.value in "([{":
            depth += 1
        elif t.kind == "operator" and t.value in ")]}":
            depth -= 1
            if depth == 0 and i < len(toks) - 1:
                return False
    return True


def parse_bool(toks: list[Tok]) -> BoolExpr:
    if any(t.kind == "name" and t.value in ("if", "else") for _, t in top_level(toks)):
        return BoolExpr("atom", toks=toks)
    for word in ("or", "and"):
        parts = _split(toks, word)
        if len(parts) > 1 and all(parts):
            return BoolExpr(word, [parse_bool(p) for p in parts])
    if toks and toks[0].kind == "name" and toks[0].value == "not" and len(toks) > 1:
        return BoolExpr("not", [parse_bool(toks[1:])])
    if _wrapped(toks):
        return parse_bool(toks[1:-1])
    return BoolExpr("atom", toks=toks)


def atoms(expr: BoolExpr) -> Iterator[BoolExpr]:
    if expr.op == "atom":
        yield expr
    for k in expr.kids:
        yield from atoms(k)


def fold(src: Source, expr: BoolExpr, values: dict[int, bool]) -> tuple[bool | None, str]:
    """Simplify with some atoms (keyed by their first token's start) fixed; (constant or None, source text)."""
    if expr.op == "atom":
        at = expr.toks[0].start
        if at in values:
            return values[at], "true" if values[at] else "false"
        text = src.span_text(expr.toks)
        needs_parens = any(t.kind == "name" and t.value in ("if", "else") for _, t in top_level(expr.toks))
        return None, f"({text})" if needs_parens else text
    if expr.op == "not":
        const, text = fold(src, expr.kids[0], values)
        if const is not None:
            return not const, "false" if const else "true"
        kid = expr.kids[0]
        return None, "not " + (text if kid.op == "atom" else f"({text})")
    absorbing = expr.op == "or"  # True absorbs an or, False absorbs an and
    kept: list[tuple[BoolExpr, str]] = []
    for kid in expr.kids:
        const, text = fold(src, kid, values)
        if const is absorbing:
            return absorbing, "true" if absorbing else "false"
        if const is None:
            kept.append((kid, text))
    if not kept:
        return (not absorbing), "false" if absorbing else "true"
    if len(kept) == 1:
        return None, kept[0][1]
    return None, f" {expr.op} ".join(t if k.op in ("atom", "not") else f"({t})" for k, t in kept)
