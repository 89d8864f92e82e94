"""Values a template picks by looking a key up in a literal: conditions without an ``if``, counted by coverage.

jinja compiles ``{True: A, False: B}[TEST]`` and ``[B, A][TEST | int]`` to ``environment.getitem(LITERAL, KEY)``: a
two-way lookup of a test (``is_two_way``), whose arms are its two values (``two_way_values``). It compiles
``{'[]': A, 'null': B}[KEY]`` and ``[A, B, C][KEY]`` the same way, and ``{'[]': A}.get(KEY, DEFAULT)`` to the
sandbox's ``environment.call(context, environment.getattr(LITERAL, 'get'), KEY, DEFAULT)``: a lookup among constant
keys or indices (``choice``), whose arms are its keys and, for ``.get``, its default (``choice_arms``).
``rendering/coverage.py`` reads these from jinja's compiled code and probes the key each renders with.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LOOKUP = -1  # a two-way lookup of a test, as ``coverage``'s conditions mark it (``is_two_way``)


def code_of(part: ast.AST | list[ast.stmt]) -> str:
    """The Python source of a node or of a block of statements (where an arm's code is looked into)."""
    return "\n".join(ast.unparse(n) for n in part) if isinstance(part, list) else ast.unparse(part)


CHOICE = -2  # a lookup among a literal's constant keys (``choice``)
DEFAULT = object()  # the arm of a ``.get``'s default (no key of the literal matched)
_CONSTANTS = (str, int, float, bool, type(None))


def choice(node: ast.Call) -> tuple[ast.Dict | ast.List | ast.Tuple, int, bool] | None:
    """A value picked by a key among a literal's constant keys, with a key that is not a constant:
    ``environment.getitem({'[]': A, ...}, KEY)`` (``{...}[KEY]`` in the template) or, in the sandbox's call,
    ``environment.call(context, environment.getattr({'[]': A, ...}, 'get'), KEY[, DEFAULT])`` (``{...}.get(KEY,
    DEFAULT)``); or by an index among a list of three values or more, ``[A, B, C][KEY]`` (red team 27 hid nine
    history rewrites behind ``[c, NEW, c][(hist and COND)|int]``): the literal, the index of the key among the
    call's arguments, and whether a default is picked where no key matches (``.get``'s). None for anything else (a
    two-way lookup of a test, ``[B, A][TEST]`` too, is ``is_two_way``'s)."""
    func = node.func
    if not (type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "environment"):
        return None
    args = node.args
    literal: ast.expr | None
    if func.attr == "getitem" and len(args) == 2:
        literal, at, default = args[0], 1, False
    elif func.attr == "call" and len(args) in (3, 4) and _dict_get(args[1]) is not None:
        literal, at, default = _dict_get(args[1]), 2, True
    else:
        return None
    if type(args[at]) is ast.Constant:
        return None
    if type(literal) in (ast.List, ast.Tuple) and not default and len(literal.elts) > 2:  # type: ignore[union-attr]
        return literal, at, default  # type: ignore[return-value]
    if type(literal) is not ast.Dict or not literal.keys:
        return None
    if not all(type(k) is ast.Constant and type(k.value) in _CONSTANTS for k in literal.keys):
        return None
    return literal, at, default


def _dict_get(expr: ast.expr) -> ast.expr | None:
    """The literal of ``environment.getattr(LITERAL, 'get')`` (a literal's ``.get`` in the sandbox), else None."""
    if not (type(expr) is ast.Call and type(expr.func) is ast.Attribute and expr.func.attr == "getattr"):
        return None
    args = expr.args
    if len(args) == 2 and type(args[1]) is ast.Constant and args[1].value == "get" and type(args[0]) is ast.Dict:
        return args[0]
    return None


@dataclass(frozen=True)
class ChoiceArms:
    """A lookup's arms: each arm's probe key with the constant key it stands for (``DEFAULT`` for ``.get``'s
    default) and whether its value raises; the literal's keys as the template writes them. An arm's name holds its
    key whole (the looked-up expression is cut as any test is): the key is what a loop would have to send."""

    arms: dict[int, tuple[Any, bool]]
    keys: str
    length: int = 0  # a list's: its negative indices pick its arms too (``[A, B, C][-1]`` is C)

    def by_key(self) -> tuple[dict[Any, int], int | None]:
        """The probe key of each constant key's arm, and of the default's (None without one)."""
        found = {key: arm for arm, (key, _) in self.arms.items() if key is not DEFAULT}
        found.update({key - self.length: arm for key, arm in list(found.items()) if self.length})
        default = next((arm for arm, (key, _) in self.arms.items() if key is DEFAULT), None)
        return found, default


# str methods that answer True or False (``c.startswith('eyJ')``)
_PREDICATES = frozenset(
    {"startswith", "endswith", "isdigit", "isalpha", "isalnum", "isspace", "islower", "isupper", "istitle"}
    | {"isnumeric", "isdecimal", "isidentifier", "isprintable", "isascii"}
)


def is_truth(expr: ast.expr, functions: dict[str, str]) -> bool:
    """Whether jinja's compiled ``expr`` is True or False whatever a conversation holds, or 0 or 1: a comparison, a
    ``not``, a test, a str predicate (``c.startswith(...)``), ``and``/``or`` of those, ``min``/``max`` of a list of
    them, or ``|int``/``|bool`` of one (``functions``: the compiled code's ``t_N`` and the filter or test each is).
    A list looked up by such a key (``[c, NEW, c][(TEST)|int]``) can pick its first two values only."""
    if type(expr) is ast.Compare or (type(expr) is ast.UnaryOp and type(expr.op) is ast.Not):
        return True
    if type(expr) is ast.BoolOp:
        return all(is_truth(v, functions) for v in expr.values)
    if type(expr) is not ast.Call:
        return False
    func = expr.func
    if type(func) is ast.Name:
        kind = functions.get(func.id, "")
        if kind.startswith("test:"):
            return True
        args = [a for a in expr.args if not (type(a) is ast.Name and a.id in ("environment", "context"))]
        if kind in ("filter:int", "filter:bool") and args:
            return is_truth(args[0], functions)
        if kind in ("filter:min", "filter:max") and args and type(args[0]) in (ast.List, ast.Tuple):
            return all(is_truth(v, functions) for v in args[0].elts)  # type: ignore[attr-defined]
        return False
    # the sandbox's call of a method: ``environment.call(context, environment.getattr(c, 'startswith'), ...)``
    called = expr.args[1] if len(expr.args) > 1 else None
    return (
        type(func) is ast.Attribute
        and func.attr == "call"
        and type(called) is ast.Call
        and type(called.func) is ast.Attribute
        and called.func.attr == "getattr"
        and len(called.args) == 2
        and type(called.args[1]) is ast.Constant
        and called.args[1].value in _PREDICATES
    )


def choice_arms(
    conditions: Sequence[tuple[ast.AST, int | None]], max_chars: int, functions: dict[str, str] | None = None
) -> dict[int, ChoiceArms]:
    """The arms of each lookup among constant keys (by its index among ``conditions``), each with a probe key of its
    own after the three keys of every condition. One arm per key as a dict holds it (``{True: A, 1: B}`` has one
    key, whose value is the last written: Python's and jinja's lookup alike). A list looked up by a key that is
    True or False (``is_truth``) has two arms, its first two values: no conversation can pick the others."""
    found: dict[int, ChoiceArms] = {}
    next_key = 3 * len(conditions) + 1
    for k, (node, operand) in enumerate(conditions):
        if operand != CHOICE:
            continue
        found_choice = choice(node) if type(node) is ast.Call else None
        if found_choice is None:
            continue
        literal, at, default = found_choice
        values: dict[Any, ast.expr] = {}
        if type(literal) is ast.Dict:
            for key, value in zip(literal.keys, literal.values, strict=True):
                values[key.value] = value  # type: ignore[union-attr]
        else:
            values = dict(enumerate(literal.elts))  # type: ignore[union-attr]
            if is_truth(node.args[at], functions or {}):  # type: ignore[attr-defined]
                values = {0: values[0], 1: values[1]}
        arms: dict[int, tuple[Any, bool]] = {}
        for key, value in values.items():
            arms[-next_key] = (key, "raise_exception" in code_of(value))
            next_key += 1
        if default:
            rest = node.args[at + 1 :]  # type: ignore[attr-defined]
            arms[-next_key] = (DEFAULT, any("raise_exception" in code_of(v) for v in rest))
            next_key += 1
        length = 0 if type(literal) is ast.Dict else len(values)
        found[k] = ChoiceArms(arms, repr(tuple(values))[:max_chars], length)
    return found


def two_way_values(literal: ast.expr) -> tuple[ast.expr, ast.expr]:
    """The values a two-way lookup's literal picks for a true key and for a false one."""
    if isinstance(literal, ast.Dict):
        by_key = {bool(k.value): v for k, v in zip(literal.keys, literal.values, strict=True)}  # type: ignore[union-attr]
        return by_key[True], by_key[False]
    return literal.elts[1], literal.elts[0]  # type: ignore[attr-defined]


def is_two_way(node: ast.Call) -> bool:
    """``environment.getitem(LITERAL, KEY)``: ``{True: A, False: B}[TEST]`` or ``[B, A][TEST]`` in the template (a
    value picked by a test without a condition), with a key that is not a constant (jinja folds those)."""
    func = node.func
    if not (
        type(func) is ast.Attribute
        and func.attr == "getitem"
        and type(func.value) is ast.Name
        and func.value.id == "environment"
        and len(node.args) == 2
        and type(node.args[1]) is not ast.Constant
    ):
        return False
    literal = node.args[0]
    if type(literal) is ast.Dict:
        keys = literal.keys
        return (
            len(keys) == 2
            and all(type(k) is ast.Constant and k.value in (True, False) and type(k.value) in (bool, int) for k in keys)
            and {bool(k.value) for k in keys} == {True, False}  # type: ignore[union-attr]
        )
    return type(literal) in (ast.List, ast.Tuple) and len(literal.elts) == 2  # type: ignore[attr-defined]
