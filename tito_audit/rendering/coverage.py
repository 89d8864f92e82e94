"""Which of a template's branches ran: its ``{% if %}`` arms, counted in the code jinja compiled it to.

A verdict earned on the conversations played says nothing about an arm of the template no conversation took: a
``{% elif message.role == 'developer' %}`` that rewrites history is as invisible to the catalogue as to the
search, unless it is named. jinja compiles every ``{% if %}``/``{% elif %}``/``{% else %}`` to a Python
``if``/``elif``/``else`` whose body starts with a ``pass`` line, and marks which template line each compiled line
comes from (``debug_info``). So the arms are read from the compiled code itself (``TemplateBranches``: one pass
over its lines, jinja's own ``if`` statements left out: the generator marker, a macro's default arguments, a
namespace assignment's check, a loop's ``else`` flag, a filtered loop's test), each with its test written back in
template syntax, and that same code, parsed once, is compiled once more with a probe in place of each arm's
``pass`` and before each ``if`` (``instrumented``: jinja's own code, in the template's own sandboxed environment,
rendering the same text), which the renders an audit made are played through again to see which arms they take
(``Recorder``). An arm is *reachable by history* when it stands inside a loop over the messages (or the filter of
one) or a macro called from one; one whose ``if`` was reached but which was never taken is named
(``unexercised``). An arm that calls ``raise_exception`` is the template refusing an input, and is not named.
Conditions that pick a value rather than a block are arms too, probed by their test's own call
(``_probe_conditions``): inline ``A if TEST else B``, a loop filter's test (``{% for c in calls if TEST %}``: an
item kept or dropped), and each operand of an ``and``/``or`` that picks a value (``{{ COND and A or B }}``) but the
last (whether the next is read). An ``and``/``or`` inside a test is not: the test's own arms are counted. A value
picked by a lookup of a test in a literal (``{True: A, False: B}[TEST]``, ``[B, A][TEST | int]``) is a condition too:
its two arms are the two values, and the test's truth picks one (a red team hid twelve history rewrites behind it);
so is one picked among a literal's constant keys (``{'[]': A}.get(KEY, DEFAULT)``: an arm per key, and the default;
``literal_lookups``). What picks a value otherwise (arithmetic on a test: ``'x' * (TEST | int)``) has no arm.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tito_audit.rendering.compiled_syntax import Segments, template_syntax
from tito_audit.rendering.literal_lookups import (
    CHOICE,
    DEFAULT,
    LOOKUP,
    ChoiceArms,
    choice,
    choice_arms,
    code_of,
    is_two_way,
    two_way_values,
)
from tito_audit.rendering.macro_memo import bind_from_context, memoize_macros

# ``if`` statements jinja writes for itself: the generator marker, a macro's default arguments, a namespace
# assignment's check, a loop's ``else`` flag.
_INTERNAL = re.compile(
    r"^(0|l_\d+_\w+ is missing|not isinstance\(.*Namespace\)|t_\d+|not t_\d+|context\.eval_ctx\.autoescape)$"
)
_FUNCTION = re.compile(r"^t_(\d+) = environment\.(filters|tests)\[['\"]([^'\"]+)['\"]\]$")
_MAX_TEST = 100  # characters of an arm's test shown
PROBE = "__tito_arm__"  # the render variable an instrumented template's probes call


@dataclass(frozen=True)
class Branch:
    """One arm of an ``{% if %}``: its template line, its test in template syntax (``else of TEST`` for an else),
    the compiled line of its chain's ``if`` and of its body's first statement, whether history can reach it,
    whether it raises."""

    line: int
    test: str
    test_line: int
    body_line: int
    history: bool
    raises: bool = False

    @property
    def name(self) -> str:
        """``template_line:N: TEST`` (a ``not_probed`` reason)."""
        return f"template_line:{self.line}: {self.test}"


class TemplateBranches:
    """The ``{% if %}`` arms of one compiled template. ``code``: the Python source jinja generated for it (the
    compile's own: ``analysis.template_code``); ``root``: the compiled template's root render function."""

    def __init__(self, code: str, debug_info: list[tuple[int, int]]) -> None:
        self.code = code
        template_line = _line_map(debug_info)
        functions: dict[str, str] = {}
        self.branches: list[Branch] = []
        lines = code.splitlines()
        history_lines = _history_lines(lines)
        # a loop over the messages was found: without one (renamed, in a macro, recursive), which arms history
        # reaches cannot be told, and none would be named (``audit.coverage`` names that instead)
        self.history_found = bool(history_lines)
        for arm in _arms(lines, functions, history_lines):
            test, test_line, own_line, body_line, history, raises = arm
            text = template_syntax(test, functions)[:_MAX_TEST]
            # an if/elif arm is where its test is; an else arm (jinja marks no line of its own) where it writes first
            line = template_line(body_line, after=True) if test.startswith("else of ") else template_line(own_line)
            self.branches.append(Branch(line, text, test_line, body_line, history, raises))
        # the compiled code parsed once: its inline conditions are read from this tree, and ``instrumented`` puts
        # its probes into the same tree
        self._tree: ast.Module | None = ast.parse(code)
        self._conditions = _inline_conditions(self._tree)
        self.memoized: list[str] = []  # the macros the instrumented copy renders once per input (``macro_memo``)
        segment = Segments(code)
        # the arms of each lookup among constant keys (``choice_arms``): keys no compiled line has, after the three of
        # every condition
        self._choices = choice_arms(self._conditions, _MAX_TEST, functions)
        for k, (node, operand) in enumerate(self._conditions):
            # an inline ``A if TEST else B`` (a value, a slice bound, a filter's argument...), a loop filter's test,
            # an and/or operand that picks a value: its two arms, each named by keys no compiled line has
            # (negative), probed by the test's own call (``_probe_conditions``)
            decided = _decided(node, operand)
            source = segment(decided) or ast.unparse(decided)
            test = template_syntax(source, functions)[:_MAX_TEST]
            line, history = template_line(decided.lineno), decided.lineno in history_lines
            reached, taken, other = -(3 * k + 1), -(3 * k + 2), -(3 * k + 3)
            if operand == CHOICE:
                keys = self._choices[k].keys
                for probe_key, (key, raises) in self._choices[k].arms.items():
                    looked_up = f"({test})" if " " in test else test
                    picked = f"{looked_up} == {key!r}" if key is not DEFAULT else f"else of {looked_up} in {keys}"
                    self.branches.append(Branch(line, picked, reached, probe_key, history, raises))
                continue
            if operand is None:
                body_raises = "raise_exception" in code_of(node.body)  # type: ignore[union-attr]
                else_raises = "raise_exception" in code_of(node.orelse)  # type: ignore[union-attr]
            elif operand == LOOKUP:  # the value picked where the key is true (``True``, index 1), and the other
                values = two_way_values(node.args[0])  # type: ignore[union-attr]
                body_raises, else_raises = ("raise_exception" in code_of(v) for v in values)
            else:  # the operands after it are read when ``and``'s is true (``or``'s false)
                rest = "raise_exception" in "".join(ast.unparse(v) for v in node.values[operand + 1 :])  # type: ignore[union-attr]
                and_ = isinstance(node.op, ast.And)  # type: ignore[union-attr]
                body_raises, else_raises = (rest, False) if and_ else (False, rest)
            self.branches.append(Branch(line, test, reached, taken, history, body_raises))
            self.branches.append(Branch(line, "else of " + test, reached, other, history, else_raises))

    def instrumented(self, compiled: Any) -> Any:
        """The compiled template once more, from the same code with a probe call in place of each arm's ``pass`` and
        before each ``if``, and each inline condition's test passed through a probe (line numbers as in ``code``);
        render it with ``PROBE=recorder.probe``. None where an arm does not start with jinja's ``pass`` (no code
        this reading knows). The probes go into the tree ``__init__`` parsed (parsed again for a second call)."""
        tree, conditions = self._tree, self._conditions
        if tree is None:
            tree = ast.parse(self.code)
            conditions = _inline_conditions(tree)
        self._tree = None  # the tree is the instrumented code's from here on
        if not _probe_arms(tree, {b.body_line for b in self.branches}, {b.test_line for b in self.branches}):
            return None
        _probe_conditions(conditions, self._choices)
        _bind_probe(tree)
        if "= Macro(environment, macro," in self.code:  # the walk is for templates that define a macro
            self.memoized = memoize_macros(tree)
        code = compile(tree, "<template>", "exec")
        return compiled.environment.template_class.from_code(compiled.environment, code, compiled.globals)

    def unexercised(self, ran: set[int]) -> list[Branch]:
        """The arms history can reach whose ``if`` was reached and which were never taken (``ran``: the probes hit:
        ``Recorder.ran``)."""
        return [
            b for b in self.branches if b.history and not b.raises and b.test_line in ran and b.body_line not in ran
        ]


class Recorder:
    """The probes an instrumented template has hit (``TemplateBranches.instrumented``), accumulated over the renders
    played through it: the compiled lines of the ``if`` statements reached and of the arms taken."""

    def __init__(self) -> None:
        self.ran: set[int] = set()

    def probe(self, line: int, *value: Any) -> Any:
        """A compiled line reached; with a ``value``, an inline condition's test (``_probe_conditions``): ``line`` is
        its key, the arm its value takes is recorded too, and the value is returned unchanged."""
        self.ran.add(line)
        if len(value) == 3:  # a lookup among constant keys: its key, each key's arm, the default's (or None)
            key, arms, default = value
            try:
                arm = arms.get(key, default)
            except Exception:  # a key no dict can hold (unhashable): the lookup finds none of the literal's
                arm = default
            if arm is not None:
                self.ran.add(arm)
            return key
        if value:
            self.ran.add(line - 1 if value[0] else line - 2)
            return value[0]
        return None


# a node, and for an and/or which operand decides (``LOOKUP`` for a lookup: ``environment.getitem(LITERAL, KEY)``)
_Condition = tuple[ast.IfExp | ast.If | ast.BoolOp | ast.Call, int | None]


def _decided(node: ast.AST, operand: int | None) -> ast.expr:
    """The expression a condition's arm depends on: its test, the and/or operand, or the lookup's key."""
    if operand is None:
        return node.test  # type: ignore[attr-defined]
    if operand == LOOKUP:
        return node.args[1]  # type: ignore[attr-defined]
    if operand == CHOICE:
        return node.args[choice(node)[1]]  # type: ignore[arg-type,index,attr-defined]
    return node.values[operand]  # type: ignore[attr-defined]


def _inline_conditions(tree: ast.AST) -> list[_Condition]:
    """The conditions of the template in the compiled code that pick a value rather than a block, in source order:
    its inline conditional expressions, and its loop filters' tests (``{% for c in calls if TEST %}``: jinja writes
    them in a generator ``def t_N(fiter)`` whose ``if`` keeps an item or drops it, and an item dropped from history
    only is a rewrite like any other). Those inside a render function (where ``context`` is, for the probe) whose
    test is the template's, not jinja's own (a missing variable's lookup, autoescape). And the ``and``/``or`` that
    pick a value (``{{ COND and A or B }}``, the idiom before inline ``if``): each operand but the last decides
    whether the next is read, so each is a condition of its own; an ``and``/``or`` inside a test (an ``if``'s, an
    inline ``if``'s, a comprehension's, a ``while``'s) is not (the test's own arms are counted).

    One recursive pass, children before their node (the order the probes' keys follow). A hand-written walk, not an
    ``ast.NodeVisitor``: the visitor's dispatch cost about a tenth of a whole corpus scan."""
    found: list[_Condition] = []

    def visit(node: ast.AST, scope: bool, loop_filter: bool, in_test: bool) -> None:
        # scope: inside a function that has ``context`` (or is nested in one); loop_filter: the innermost function
        # is a loop filter's generator; in_test: the node is (inside) an expression something tests
        kind = type(node)
        if kind is ast.FunctionDef:
            args = node.args.args  # type: ignore[attr-defined]
            scope = scope or any(a.arg == "context" for a in args)
            loop_filter = _LOOP_FILTER.match(node.name) is not None and [a.arg for a in args] == ["fiter"]  # type: ignore[attr-defined]
        tests = _TESTED.get(kind)
        for name in node._fields:
            value = getattr(node, name, None)
            inner = in_test or name == tests
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        visit(item, scope, loop_filter, inner)
            elif isinstance(value, ast.AST):
                visit(value, scope, loop_filter, inner)
        if not scope:
            return
        if kind is ast.IfExp or (kind is ast.If and loop_filter):
            if not _INTERNAL.match(ast.unparse(node.test)):  # type: ignore[attr-defined]
                found.append((node, None))  # type: ignore[arg-type]
        elif kind is ast.BoolOp and not in_test:
            found.extend((node, k) for k in range(len(node.values) - 1))  # type: ignore[attr-defined,misc]
        elif kind is ast.Call and is_two_way(node):  # type: ignore[arg-type]
            found.append((node, LOOKUP))  # type: ignore[arg-type]
        elif kind is ast.Call and choice(node) is not None:  # type: ignore[arg-type]
            found.append((node, CHOICE))  # type: ignore[arg-type]

    visit(tree, False, False, False)
    return found


# the field of each node kind that holds an expression it tests
_TESTED: dict[type, str] = {
    ast.If: "test",
    ast.IfExp: "test",
    ast.While: "test",
    ast.Assert: "test",
    ast.comprehension: "ifs",
}
_LOOP_FILTER = re.compile(r"^t_\d+$")


def _probe_arms(tree: ast.Module, bodies: set[int], tests: set[int]) -> bool:
    """Put a probe call in place of each arm's first statement (``bodies``: jinja's ``pass``) and before each chain's
    ``if`` (``tests``), in the statement blocks of ``tree``; False where a body's first statement is not a ``pass``
    or a line is not where a statement starts (code this reading does not know: nothing is promised of the tree)."""
    wanted = {n for n in bodies if n > 0} | {n for n in tests if n > 0}
    placed: set[int] = set()
    blocks: list[list[ast.stmt]] = [tree.body]
    while blocks:
        block = blocks.pop()
        out: list[ast.stmt] = []
        for stmt in block:
            number = stmt.lineno
            if number in bodies:
                if type(stmt) is not ast.Pass:
                    return False
                out.append(_probe_statement(number, stmt))
                placed.add(number)
                continue
            if number in tests:
                out.append(_probe_statement(number, stmt))
                placed.add(number)
            out.append(stmt)
            for field in _BLOCKS:
                inner = getattr(stmt, field, None)
                if inner:
                    blocks.extend([h.body for h in inner] if field == "handlers" else [inner])
        block[:] = out
    return placed == wanted


_BLOCKS = ("body", "orelse", "finalbody", "handlers")  # the fields of a statement that hold statements


def _probe_conditions(conditions: list[_Condition], choices: dict[int, ChoiceArms]) -> None:
    """Each inline condition (``_inline_conditions``, the same order) tests ``probe(KEY, TEST)`` instead
    of ``TEST``: the same value, and the arm it takes recorded. A lookup among constant keys looks up
    ``probe(KEY, LOOKED_UP, {key: arm, ...}, DEFAULT_ARM)`` (``choices``: ``_choice_arms``)."""
    for k, (node, operand) in enumerate(conditions):
        key = -(3 * k + 1)
        if operand == CHOICE:
            at = choice(node)[1]  # type: ignore[arg-type,index]
            by_key, default = choices[k].by_key()
            looked_up = node.args[at]  # type: ignore[union-attr]
            arms = ast.Dict([ast.Constant(c) for c in by_key], [ast.Constant(a) for a in by_key.values()])
            extra = [ast.copy_location(arms, looked_up), ast.copy_location(ast.Constant(default), looked_up)]
            probed = _probe_value(key, looked_up)
            probed.args.extend(ast.fix_missing_locations(e) for e in extra)  # type: ignore[attr-defined]
            node.args[at] = probed  # type: ignore[union-attr]
        elif operand is None:
            node.test = _probe_value(key, node.test)  # type: ignore[union-attr]
        elif operand == LOOKUP:  # the key, whose truth picks the value (``_lookup_values``)
            node.args[1] = _probe_value(key, node.args[1])  # type: ignore[union-attr]
        else:
            node.values[operand] = _probe_value(key, node.values[operand])  # type: ignore[union-attr]


_BOUND = "__tito_probe__"  # the local each render function binds the probe to (``_bind_probe``)


def _probe_call(at: ast.AST) -> ast.expr:
    """The recorder's probe (placed at ``at``): the local ``_bind_probe`` binds it to."""
    return ast.copy_location(ast.Name(_BOUND, ast.Load()), at)


def _bind_probe(tree: ast.Module) -> None:
    """``__tito_probe__ = context.get(PROBE)`` first in each render function: the probe read from the context once
    per call instead of at every probe (a fifth of an instrumented render's time)."""
    bind_from_context(ast.walk(tree), _BOUND, PROBE)


def _probe_statement(number: int, at: ast.stmt) -> ast.stmt:
    """``probe(number)`` as a statement, at ``at``'s place."""
    call = ast.Call(_probe_call(at), [ast.copy_location(ast.Constant(number), at)], [])
    return ast.copy_location(ast.Expr(ast.copy_location(call, at)), at)


def _probe_value(key: int, value: ast.expr) -> ast.expr:
    """``probe(key, value)``: ``value``, with the arm it takes recorded."""
    return ast.copy_location(
        ast.Call(_probe_call(value), [ast.copy_location(ast.Constant(key), value), value], []), value
    )


_Arm = tuple[str, int, int, int, bool, bool]  # test, chain's if line, own line, body line, history, raises
_MACRO = re.compile(r"= Macro\(environment, macro, '(\w+)'")
# the generator jinja writes for a loop's filter (``{% for c in calls if TEST %}``), a line of the compiled code
_FILTER_DEF = re.compile(r"^def (t_\d+)\(fiter\):$")


def _filter_def(line: str) -> str | None:
    """The name of the loop-filter generator ``line`` defines (``t_3``), else None."""
    found = _FILTER_DEF.match(line.strip())
    return found[1] if found else None


def _arms(lines: list[str], functions: dict[str, str], history_lines: set[int]) -> Iterator[_Arm]:
    """Every arm of the compiled code's template ``if`` statements (see the module docstring), one pass over its
    lines with the stack of the blocks each stands in. History reaches an arm inside a loop over messages, or
    inside a macro called (directly or through another macro) from inside one."""
    stack: list[tuple[int, str]] = []  # (indent, what opened the block: "skip" for a filtered loop's generator)
    chains: dict[int, tuple[int, str]] = {}  # indent -> the if/elif chain open there: its ``if`` line, its tests
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text:
            continue
        indent = len(line) - len(text)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        found = _FUNCTION.match(text)
        if found:
            functions[f"t_{found[1]}"] = f"{found[2][:-1]}:{found[3]}"  # "filter:lower", "test:defined"
        if any(kind == "skip" for _, kind in stack):
            continue
        arm = _arm(text, indent, chains, number)
        if arm is not None and not _INTERNAL.match(arm[0].removeprefix("else of ")):
            test, start = arm  # the line of the chain's ``if``: reached whenever any of its arms is decided
            yield test, start, number, _body(lines, number), number in history_lines, _raises(lines, number, indent)
        if text.endswith(":"):
            stack.append((indent, "skip" if _FILTER_DEF.match(text) else ""))


def _history_lines(lines: list[str]) -> set[int]:
    """The compiled lines history reaches: those inside a loop over messages, and those of the macros called from
    such a line (or from such a macro)."""
    loops: list[range] = []
    macros: dict[str, range] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("for ") and "message" in text.split(" in ", 1)[-1]:
            loops.append(range(number, _block_end(lines, number)))
            # a filter on the loop itself (``{% for m in messages if TEST %}``): jinja writes its ``def t_N(fiter)``
            # just before the ``for``, and it decides which messages history holds
            filtered = re.match(r"for .+? in (t_\d+)\(", text)
            if filtered:
                start = next((k for k in range(number - 1, 0, -1) if _filter_def(lines[k - 1]) == filtered[1]), None)
                if start is not None:
                    loops.append(range(start, _block_end(lines, start)))
        elif text.startswith("def macro("):
            end = _block_end(lines, number)
            named = next((m for line in lines[end - 1 : end + 2] if (m := _MACRO.search(line))), None)
            if named:  # the Macro(...) that binds it follows the block (after an export line)
                macros[named[1]] = range(number, end)
    reached: set[int] = {n for loop in loops for n in loop}
    for _ in range(len(macros) + 1):  # macros called from history, to a fixed point
        grown = False
        for name, span in macros.items():
            if span.start in reached:
                continue
            called = re.compile(rf"\bl_\d+_{name}\b|name='{name}'")
            if any(called.search(lines[n - 1]) for n in reached if n not in span):
                reached.update(span)
                grown = True
        if not grown:
            break
    return reached


def _block_end(lines: list[str], number: int) -> int:
    """The line after the block the line ``number`` opens (the first later line indented no deeper)."""
    indent = len(lines[number - 1]) - len(lines[number - 1].lstrip())
    for k in range(number, len(lines)):
        text = lines[k].strip()
        if text and len(lines[k]) - len(text) <= indent:
            return k + 1
    return len(lines) + 1


def _arm(text: str, indent: int, chains: dict[int, tuple[int, str]], number: int) -> tuple[str, int] | None:
    """The test of an ``if``/``elif`` line (``else of TESTS`` for an ``else:`` line) and the line of its chain's
    ``if``, else None."""
    if text.startswith("if ") and text.endswith(":"):
        chains[indent] = (number, text[3:-1])
        return text[3:-1], number
    start, tests = chains.get(indent, (number, ""))
    if text.startswith("elif ") and text.endswith(":"):
        chains[indent] = (start, tests + " / " + text[5:-1])
        return text[5:-1], start
    if text == "else:" and indent in chains:
        return "else of " + tests, start
    return None


def _body(lines: list[str], number: int) -> int:
    """The line of the first statement after line ``number`` (jinja writes ``pass`` first in every arm)."""
    for k in range(number, len(lines)):
        if lines[k].strip():
            return k + 1
    return number


def _raises(lines: list[str], number: int, indent: int) -> bool:
    """The arm's body calls ``raise_exception`` (the template refusing an input)."""
    for line in lines[number:]:
        text = line.strip()
        if text and len(line) - len(text) <= indent:
            return False
        if "raise_exception" in text:
            return True
    return False


def _line_map(debug_info: Iterable[tuple[int, int]]) -> Any:
    """Compiled line -> template line (jinja's ``debug_info``: the template line of each marked compiled line):
    that of the last mark at or before the line, or with ``after`` of the first at or after it."""
    marks = sorted((code, template) for template, code in debug_info)

    def template_line(code_line: int, after: bool = False) -> int:
        if after:
            return next((template for code, template in marks if code >= code_line), 0) or template_line(code_line)
        found = 0
        for code, template in marks:
            if code > code_line:
                break
            found = template
        return found

    return template_line
