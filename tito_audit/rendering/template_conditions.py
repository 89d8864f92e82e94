"""Conditions in a template as the patches see them: Jinja's AST of an expression, and a boolean view over its
atoms that keeps each atom's source text so a condition can be rewritten with some atoms fixed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tito_audit.rendering.template_source import PatchError, Source, Tok, environment, parenthesized, top_level


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


def parse_bool(toks: list[Tok]) -> BoolExpr:
    if any(t.kind == "name" and t.value in ("if", "else") for _, t in top_level(toks)):
        return BoolExpr("atom", toks=toks)
    for word in ("or", "and"):
        parts = _split(toks, word)
        if len(parts) > 1 and all(parts):
            return BoolExpr(word, [parse_bool(p) for p in parts])
    if toks and toks[0].kind == "name" and toks[0].value == "not" and len(toks) > 1:
        return BoolExpr("not", [parse_bool(toks[1:])])
    if parenthesized(toks):
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
