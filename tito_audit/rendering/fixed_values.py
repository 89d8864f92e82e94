"""What a template's code fixes without running anything: the one constant string a variable holds and the whole
numbers an expression always is (``message_reads`` reads thresholds and literals with them).

A number is read where the code fixes it: a constant, a variable or namespace attribute set to numbers
(``set th = 12``, ``namespace(th=12)``) or looping over them (``for th in [12]``), a table's values
(``{% set cfg = {'clip': 1000} %}``: ``cfg.clip``, ``cfg['clip']``, any of them for ``budget[message.role]``), a
setting's default (``max_chars|default(1500)``: what a caller who leaves it out gets), arithmetic of those (``6 * 2``,
``2 ** 11``; ``(300 * 3.5)|int`` through floats), ``'12'|int`` and ``('4' ~ '000')|int``, ``[12]|first`` (``last``,
``min``, ``max``), the length of a literal or of a ``range`` of constants; never past ``LARGEST`` (the template is
untrusted: no power past ``_LARGEST_EXPONENT``, no string past ``MAX_CONSTANT``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jinja2 import nodes

COUNT_FILTERS = frozenset({"length", "count"})  # filters that count a list (or a text's characters)
_PICK: dict[str, Any] = {"first": lambda xs: xs[0], "last": lambda xs: xs[-1], "min": min, "max": max}
LARGEST = 10**7  # a whole number read past this is no threshold (and no arithmetic on it is done)
MAX_CONSTANT = 10_000  # characters of a string read as a constant, at most (``'ab' * 10**9`` is never built)


class FixedValues:
    """The constant strings and whole numbers of one template's variables (``bind_values``), and of any expression
    of it (``constant``, ``whole_number``, ``numbers_in``)."""

    def __init__(self) -> None:
        self.constants: dict[str, str | None] = {}  # variable -> its one constant string (None: set otherwise)
        self.numbers: dict[str, set[int]] = {}  # variable (``ns.attr`` too) -> the whole numbers it is set to

    def bind_values(self, template_nodes: Sequence[nodes.Node]) -> None:
        """What each variable of ``template_nodes`` is set to: the one constant string (``set sep = '.'``,
        ``set sep = 'mcp__'[3:]``; None where it is set otherwise), then the whole numbers (``_bind_numbers``: a
        number may be read from a string variable, ``sep|int``)."""
        for node in template_nodes:
            if not isinstance(node, nodes.Assign):
                continue
            name = assigned_name(node.target)
            if name is None:
                continue
            value = self.constant(node.node)
            self.constants[name] = value if value is not None and self.constants.get(name, value) == value else None
        self._bind_numbers(template_nodes)

    def constant(self, node: nodes.Node) -> str | None:
        """The string ``node`` always is, read without running anything: a string constant, a variable set to one,
        and ``~`` or ``+`` of those or a slice of one by fixed bounds (``'4' ~ '000'``, ``'mcp__'[3:]``); None
        otherwise (or past ``MAX_CONSTANT`` characters)."""
        value = self._constant(node)
        return value if value is None or len(value) <= MAX_CONSTANT else None

    def _constant(self, node: nodes.Node) -> str | None:
        if isinstance(node, nodes.Const):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, nodes.Name):
            return self.constants.get(node.name)
        if isinstance(node, nodes.Concat | nodes.Add):
            operands = node.nodes if isinstance(node, nodes.Concat) else (node.left, node.right)
            parts = [self.constant(n) for n in operands]
            return None if None in parts else "".join(parts)  # type: ignore[arg-type]
        if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            text, cut = self.constant(node.node), node.arg
            given = (cut.start, cut.stop, cut.step)
            bounds = [None if b is None else self.whole_number(b) for b in given]
            fixed = all(b is not None or part is None for b, part in zip(bounds, given, strict=True))
            return text[slice(*bounds)] if text is not None and fixed and bounds[2] != 0 else None
        return None

    def _bind_numbers(self, template_nodes: Sequence[nodes.Node]) -> None:
        """The whole numbers each variable is set to (``set th = 12``, ``set ns.th = 6 * 2``, ``namespace(th=12)``),
        to a fixed point: a threshold kept in a variable is a threshold all the same."""
        for _ in range(4):
            before = {k: set(v) for k, v in self.numbers.items()}
            for node in template_nodes:
                if isinstance(node, nodes.For) and isinstance(node.iter, nodes.List | nodes.Tuple):  # ``for th in [9]``
                    items = {n for item in node.iter.items if (n := self.whole_number(item)) is not None}
                    for target in assigned_names(node.target) if items else ():
                        self.numbers.setdefault(target, set()).update(items)
                if not isinstance(node, nodes.Assign):
                    continue
                name, value = assigned_name(node.target), node.node
                if name is None:
                    continue
                found = self.whole_number(value)
                if found is not None:
                    self.numbers.setdefault(name, set()).add(found)
                if (
                    isinstance(value, nodes.Call)
                    and isinstance(value.node, nodes.Name)
                    and value.node.name == "namespace"
                ):
                    for kw in value.kwargs:
                        found = self.whole_number(kw.value)
                        if found is not None:
                            self.numbers.setdefault(f"{name}.{kw.key}", set()).add(found)
                if isinstance(value, nodes.Dict):  # a table of settings: ``cfg.keep``, ``cfg['keep']``, ``cfg[role]``
                    for pair in value.items:
                        key, found = self.constant(pair.key), self.whole_number(pair.value)
                        if found is not None:
                            self.numbers.setdefault(f"{name}[]", set()).add(found)
                            if key is not None:
                                self.numbers.setdefault(f"{name}.{key}", set()).add(found)
            if self.numbers == before:
                break

    def whole_number(self, node: nodes.Node) -> int | None:
        """The whole number ``node`` always is, read without running anything (the module's docstring: a constant, a
        variable or a table's entry set to one number, a setting's default, arithmetic of those, ``'12'|int``, the
        length of a literal...); None otherwise (or past ``LARGEST``)."""
        value = self._whole(node)
        return value if value is not None and abs(value) <= LARGEST else None

    def _whole(self, node: nodes.Node) -> int | None:
        if isinstance(node, nodes.Const):
            return node.value if type(node.value) is int else None
        if isinstance(node, nodes.Name | nodes.Getattr | nodes.Getitem):
            values = self.numbers.get(_held_name(node, self.constant) or "")
            return next(iter(values)) if values is not None and len(values) == 1 else None
        if isinstance(node, nodes.Neg):
            inner = self.whole_number(node.node)
            return None if inner is None else -inner
        if isinstance(node, _INT_ARITHMETIC):
            left, right = self.whole_number(node.left), self.whole_number(node.right)
            value = None if left is None or right is None else _arithmetic(type(node), left, right)
            return value if type(value) is int else None  # ``2 ** -1`` is no whole number
        if isinstance(node, nodes.Filter) and node.node is not None:
            if node.name == "int" and (text := self.constant(node.node)) is not None:
                text = text.strip()
                digits = text.removeprefix("-")
                return int(text) if digits.isascii() and digits.isdigit() and len(text) < 8 else None
            if node.name == "int" and (real := self._real(node.node)) is not None:
                return int(real)  # ``(300 * 3.5)|int``
            if node.name in ("default", "d") and node.args:  # the number a setting the caller leaves out has
                own = self.whole_number(node.node)
                return own if own is not None else self.whole_number(node.args[0])
            if node.name in COUNT_FILTERS:
                return self._items(node.node)
            if node.name in _PICK and isinstance(node.node, nodes.List | nodes.Tuple) and node.node.items:
                picked = [self.whole_number(item) for item in node.node.items]  # ``[3000]|first``
                return None if None in picked else _PICK[node.name](picked)
        return None

    def _real(self, node: nodes.Node) -> int | float | None:
        """The number (a float too) ``node`` always is: a number constant, a whole number (``whole_number``), and
        arithmetic, ``|float``, ``|round``, ``|abs`` of those (``300 * 3.5``); None past ``LARGEST``."""
        if isinstance(node, nodes.Const) and type(node.value) in (int, float):
            value: int | float | None = node.value
        elif isinstance(node, nodes.Filter) and node.name in ("float", "round", "abs", "int") and node.node is not None:
            inner = self._real(node.node)
            calls: dict[str, Callable[[Any], Any]] = {"float": float, "round": round, "abs": abs, "int": int}
            value = None if inner is None else calls[node.name](inner)
        elif isinstance(node, _REAL_ARITHMETIC):
            left, right = self._real(node.left), self._real(node.right)
            value = None if left is None or right is None else _arithmetic(type(node), left, right)
        elif isinstance(node, nodes.Neg):
            inner = self._real(node.node)
            value = None if inner is None else -inner
        else:
            value = self.whole_number(node)
        return value if value is not None and abs(value) <= LARGEST else None

    def _items(self, node: nodes.Node) -> int | None:
        """How many items (characters of a string) a literal value has: a string, a list or tuple literal, a
        ``range`` of constants, and ``|list``, ``+`` and ``* N`` of those."""
        if isinstance(node, nodes.Const) and isinstance(node.value, str):
            return len(node.value)
        if isinstance(node, nodes.List | nodes.Tuple):
            return len(node.items)
        if isinstance(node, nodes.Filter) and node.name == "list" and node.node is not None:
            return self._items(node.node)
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name == "range":
            bounds = [self.whole_number(a) for a in node.args]
            if node.kwargs or node.dyn_args or not 1 <= len(bounds) <= 3 or None in bounds:
                return None
            return len(range(*bounds)) if 0 not in bounds[2:] else None  # type: ignore[arg-type]
        if isinstance(node, nodes.Add):
            left, right = self._items(node.left), self._items(node.right)
            return None if left is None or right is None else left + right
        if isinstance(node, nodes.Mul):
            for seq, times in ((node.left, node.right), (node.right, node.left)):
                size, count = self._items(seq), self.whole_number(times)
                if size is not None and count is not None:
                    return size * max(count, 0)
        return None

    def numbers_in(self, node: nodes.Node) -> set[int]:
        """The whole numbers in ``node`` (``-3`` as 3: a slice bound or a count from the end): each largest part of
        it that is always one number (``6 * 2`` as 12, ``'12'|int``: ``whole_number``), every number a variable in it
        is set to (``th``, ``ns.th``), and its other constants."""
        if isinstance(node, nodes.Const) and type(node.value) is int:  # read at any size (only arithmetic is bounded)
            return {abs(node.value)}
        value = self.whole_number(node)
        if value is not None:
            return {abs(value)}
        if (
            isinstance(node, nodes.Name | nodes.Getattr | nodes.Getitem)
            and (name := _held_name(node, self.constant)) in self.numbers
        ):
            return {abs(v) for v in self.numbers[name] if abs(v) <= LARGEST}
        if (
            isinstance(node, nodes.Getitem)
            and isinstance(node.node, nodes.Name)
            and f"{node.node.name}[]" in self.numbers
        ):
            return {abs(v) for v in self.numbers[f"{node.node.name}[]"]}  # ``budget[message.role]``: any of them
        found: set[int] = set()
        for child in node.iter_child_nodes():
            found |= self.numbers_in(child)
        return found


_INT_ARITHMETIC = (nodes.Add, nodes.Sub, nodes.Mul, nodes.FloorDiv, nodes.Mod, nodes.Pow)
_REAL_ARITHMETIC = (*_INT_ARITHMETIC, nodes.Div)
_LARGEST_EXPONENT = 64


def _arithmetic(kind: type, left: int | float, right: int | float) -> int | float | None:
    """``left OP right`` for jinja's arithmetic node ``kind``; None where it fails or would be huge (a power past
    ``_LARGEST_EXPONENT``, a base past ``LARGEST``)."""
    if kind is nodes.Pow and (abs(right) > _LARGEST_EXPONENT or abs(left) > LARGEST):
        return None
    try:
        if kind is nodes.Add:
            return left + right
        if kind is nodes.Sub:
            return left - right
        if kind is nodes.Mul:
            return left * right
        if kind is nodes.Div:
            return left / right
        if kind is nodes.FloorDiv:
            return left // right
        if kind is nodes.Mod:
            return left % right
        value = left**right
        return value if isinstance(value, int | float) else None  # a negative base to a fraction is complex
    except (ZeroDivisionError, OverflowError):
        return None


def _held_name(node: nodes.Node, constant: Any) -> str | None:
    """The name a value ``node`` reads is kept under: ``th``, ``ns.th``, ``cfg.keep`` for ``cfg.keep`` and
    ``cfg['keep']`` (``constant``: the reader's, for the key)."""
    if isinstance(node, nodes.Getitem) and isinstance(node.node, nodes.Name):
        key = constant(node.arg)
        return None if key is None else f"{node.node.name}.{key}"
    return variable_name(node)


def variable_name(node: nodes.Node) -> str | None:
    """The variable ``node`` reads: ``th``, or ``ns.th`` for a namespace attribute (as ``assigned_name`` names them)."""
    return node.name if isinstance(node, nodes.Name) else attribute_name(node)


def attribute_name(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name):
        return f"{node.node.name}.{node.attr}"
    return None


def assigned_name(node: nodes.Node) -> str | None:
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.NSRef):
        return f"{node.name}.{node.attr}"
    return None


def assigned_names(node: nodes.Node) -> list[str]:
    if isinstance(node, nodes.Tuple):
        return [n.name for n in node.items if isinstance(n, nodes.Name)]
    name = assigned_name(node)
    return [name] if name is not None else []
