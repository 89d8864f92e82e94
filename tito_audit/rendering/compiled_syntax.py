"""A test of compiled template code written back in template syntax, for the reasons that name an arm.

Coverage reads a template's arms from the Python code jinja compiles it to (``rendering.coverage``), so each arm's
test is compiled code: ``environment.getattr(l_1_message, 'role') == 'tool'``, ``t_3(environment, ...)`` for a
filter, ``environment.call(context, l_1_content.endswith, tag, _loop_vars=_loop_vars)`` for a call. A reason
``not_probed:template_line:N: TEST`` is read by people: the test is written back as the template writes it
(``message.role == 'tool'``, ``content.endswith(tag)``, ``(keys|map('length')|list + [0])|max > 24``): jinja's
reads unwrapped, its variable prefixes dropped, each filter's or test's call (``t_N``, named by the compiled
code's ``t_N = environment.filters['max']`` lines) written as ``value|filter(args)`` or ``value is test``, inner
calls first, parentheses and string literals kept whole. ``tests/rendering/test_coverage.py`` holds such tests to
their template syntax. ``Segments`` gives an expression's own text in that compiled code, to write back.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

_OPERAND = r"(?:[^(),]|\([^()]*\))+"  # an argument of compiled code: no comma or parenthesis but one group's
_REWRITES = (
    (re.compile(r"\(undefined\(name='(\w+)'\) if l_\d+_\w+ is missing else l_\d+_\w+\)"), r"\1"),
    (re.compile(r"undefined\(name='(\w+)'\) if l_\d+_\w+ is missing else l_\d+_\w+"), r"\1"),  # an operand's, bare
    (re.compile(r"environment\.getattr\((" + _OPERAND + r"), '(\w+)'\)"), r"\1.\2"),
    (re.compile(r"environment\.getitem\((" + _OPERAND + r"), \(?(-?\d+)\)?\)"), r"\1[\2]"),  # an index: (-1)
    (re.compile(r"environment\.getitem\((" + _OPERAND + r"), (" + _OPERAND + r")\)"), r"\1[\2]"),
    (re.compile(r", _(?:loop|block)_vars=_(?:loop|block)_vars"), ""),  # a call's (``_unfold_calls``)
    (re.compile(r"\bl_\d+_(\w+)"), r"\1"),
)
# what jinja passes a filter or test before the template's own arguments (``pass_context``, ``pass_environment``,
# ``pass_eval_context``): never template text
_PASSED = ("context.eval_ctx, ", "environment, ", "context, ")


def template_syntax(test: str, functions: dict[str, str]) -> str:
    """A compiled test written back near template syntax: ``message.role == 'tool'``, ``content|trim``,
    ``tools is defined``."""
    out = test
    for _ in range(8):  # nested reads unfold from the inside out
        before = out
        for pattern, repl in _REWRITES:
            out = pattern.sub(repl, out)
        out = _unfold_calls(out, functions)
        if out == before:
            break
    return out


# a filter's or test's function called (``t_N(``), or a call of the template's (``environment.call(context, ``)
_CALL = re.compile(r"\bt_\d+\(|\benvironment\.call\(context, ")


def _unfold_calls(text: str, functions: dict[str, str]) -> str:
    """Every call in ``text`` written as the template writes it, inner calls first: ``t_N(...)`` as the filter or
    test it is (``_function``), ``environment.call(context, f, x)`` as ``f(x)``."""
    out: list[str] = []
    at = 0
    for found in _CALL.finditer(text):
        if found.start() < at:
            continue  # inside a call already unfolded
        end = _closing(text, found.end())
        if end is None:
            break  # unbalanced (a test cut short): left as it is
        inner = _unfold_calls(text[found.end() : end], functions)
        if found.group(0).startswith("t_"):
            written = _function(found.group(0)[:-1], inner, functions)
        else:
            fn, args = _first_argument(inner)
            written = f"{fn}({args})"
        out += [text[at : found.start()], written]
        at = end + 1
    out.append(text[at:])
    return "".join(out)


def _scan(text: str, start: int) -> Iterator[tuple[int, str, int]]:
    """``(position, character, depth)`` from ``start``, the depth counted in parentheses and brackets outside string
    literals (whose characters are not given)."""
    depth, quote = 0, ""
    i = start
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        else:
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            yield i, char, depth
        i += 1


def _closing(text: str, start: int) -> int | None:
    """Where the parenthesis opened just before ``start`` closes."""
    return next((i for i, char, depth in _scan(text, start) if char == ")" and depth < 0), None)


def _first_argument(args: str) -> tuple[str, str]:
    """``args`` split at its first comma outside parentheses, brackets and strings: the value filtered, the rest."""
    for i, char, depth in _scan(args, 0):
        if char == "," and depth == 0 and args[i + 1 : i + 2] == " ":
            return args[:i], args[i + 2 :]
    return args, ""


def _function(name: str, args: str, functions: dict[str, str]) -> str:
    kind, _, what = functions.get(name, "filter:" + name).partition(":")
    for passed in _PASSED:
        args = args.removeprefix(passed)
    head, rest = _first_argument(args)
    if kind == "test":
        return f"{head} is {what}" + (f" {rest}" if rest else "")
    return f"{head}|{what}" + (f"({rest})" if rest else "")


class Segments:
    """``ast.get_source_segment`` over one source whose lines are split once (the library's splits the whole source
    again for every node asked)."""

    def __init__(self, source: str) -> None:
        self.lines = _SOURCE_LINE.findall(source)

    def __call__(self, node: ast.AST) -> str | None:
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            return None
        first, col = node.lineno - 1, node.col_offset  # type: ignore[attr-defined]
        last = end_line - 1
        if first == last:
            return self.lines[first].encode()[col:end_col].decode()
        head = self.lines[first].encode()[col:].decode()
        tail = self.lines[last].encode()[:end_col].decode()
        return "".join([head, *self.lines[first + 1 : last], tail])


_SOURCE_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")  # lines with their ends, as the compiler splits them
