"""Which of a template's branches ran: its ``{% if %}`` arms, traced in the code jinja compiled it to.

A verdict earned on the conversations played says nothing about an arm of the template no conversation took: a
``{% elif message.role == 'developer' %}`` that rewrites history is as invisible to the catalogue as to the
search, unless it is named. jinja compiles every ``{% if %}``/``{% elif %}``/``{% else %}`` to a Python
``if``/``elif``/``else`` whose body starts with a ``pass`` line, and marks which template line each compiled line
comes from (``debug_info``). So the arms are read from the compiled code itself (``TemplateBranches``: one pass
over its lines, jinja's own ``if`` statements left out: the generator marker, a macro's default arguments, a
namespace assignment's check, a loop's ``else`` flag, a filtered loop's test), each with its test written back in
template syntax, and the lines that run are recorded with ``sys.settrace`` while the template renders
(``Recorder``: the template's own code objects only, and only inside the renders it is given). An arm is
*reachable by history* when it stands inside a loop over the messages or a macro; one whose test ran but which
never did is named (``unexercised``). An arm that calls ``raise_exception`` is the template refusing an input and
is not named.

Where another tracer is active (a debugger, a coverage tool), nothing is recorded and ``Recorder.blocked`` says
so: the caller names that instead of passing it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

# ``if`` statements jinja writes for itself: the generator marker, a macro's default arguments, a namespace
# assignment's check, a loop's ``else`` flag.
_INTERNAL = re.compile(r"^(0|l_\d+_\w+ is missing|not isinstance\(.*Namespace\)|t_\d+|not t_\d+)$")
_FUNCTION = re.compile(r"^t_(\d+) = environment\.(filters|tests)\[['\"]([^'\"]+)['\"]\]$")
_MAX_TEST = 100  # characters of an arm's test shown


@dataclass(frozen=True)
class Branch:
    """One arm of an ``{% if %}``: its template line, its test in template syntax (``else of TEST`` for an else),
    the compiled line of its test and of its body's first statement, whether history can reach it, whether it
    raises."""

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

    def __init__(self, code: str, root: Any, debug_info: list[tuple[int, int]]) -> None:
        self.codes = frozenset(_code_tree(root.__code__))
        template_line = _line_map(debug_info)
        functions: dict[str, str] = {}
        self.branches: list[Branch] = []
        for arm in _arms(code.splitlines(), functions):
            test, test_line, body_line, history, raises = arm
            text = _template_syntax(test, functions)[:_MAX_TEST]
            # an if/elif arm is where its test is; an else arm (jinja marks no line of its own) where it writes first
            line = template_line(body_line, after=True) if test.startswith("else of ") else template_line(test_line)
            self.branches.append(Branch(line, text, test_line, body_line, history, raises))

    def unexercised(self, ran: set[int]) -> list[Branch]:
        """The arms history can reach whose test ran and which never did (``ran``: compiled lines that ran)."""
        return [
            b for b in self.branches if b.history and not b.raises and b.test_line in ran and b.body_line not in ran
        ]


class Recorder:
    """The compiled lines of ``codes`` that run inside ``with recorder:`` blocks, accumulated; ``blocked`` says why
    nothing could be recorded (another tracer is active)."""

    def __init__(self, codes: frozenset[CodeType]) -> None:
        self.codes = codes  # kept alive: their ids are what the tracer compares
        self._ids = frozenset(id(c) for c in codes)
        self.ran: set[int] = set()
        self.blocked: str | None = None
        self._depth = 0

    def __enter__(self) -> Recorder:
        self._depth += 1
        if self._depth == 1:
            if sys.gettrace() is not None:
                self.blocked = "another tracer (a debugger, a coverage tool) is active"
            else:
                sys.settrace(self._call)
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and sys.gettrace() == self._call:
            sys.settrace(None)

    def _call(self, frame: FrameType, event: str, arg: object) -> Any:
        if id(frame.f_code) in self._ids:
            self.ran.add(frame.f_lineno)
            return self._line
        return None

    def _line(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "line":
            self.ran.add(frame.f_lineno)
        return self._line


_Arm = tuple[str, int, int, bool, bool]  # test, test line, body line, history, raises
_MACRO = re.compile(r"= Macro\(environment, macro, '(\w+)'")


def _arms(lines: list[str], functions: dict[str, str]) -> Iterator[_Arm]:
    """Every arm of the compiled code's template ``if`` statements (see the module docstring), one pass over its
    lines with the stack of the blocks each stands in. History reaches an arm inside a loop over messages, or
    inside a macro called (directly or through another macro) from inside one."""
    history_lines = _history_lines(lines)
    stack: list[tuple[int, str]] = []  # (indent, what opened the block: "skip" for a filtered loop's generator)
    chains: dict[int, str] = {}  # indent -> the tests of the if/elif chain open at that indent
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
        arm = _arm(text, indent, chains)
        if arm is not None and not _INTERNAL.match(arm[0].removeprefix("else of ")):
            test, is_else = arm
            test_line = _last_test_line(lines, number, indent) if is_else else number
            yield test, test_line, _body(lines, number), number in history_lines, _raises(lines, number, indent)
        if text.endswith(":"):
            stack.append((indent, "skip" if text.startswith("def t_") and "(fiter)" in text else ""))


def _history_lines(lines: list[str]) -> set[int]:
    """The compiled lines history reaches: those inside a loop over messages, and those of the macros called from
    such a line (or from such a macro)."""
    loops: list[range] = []
    macros: dict[str, range] = {}
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if text.startswith("for ") and "message" in text.split(" in ", 1)[-1]:
            loops.append(range(number, _block_end(lines, number)))
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


def _arm(text: str, indent: int, chains: dict[int, str]) -> tuple[str, bool] | None:
    """The test of an ``if``/``elif`` line, ``else of TESTS`` for an ``else:`` line, else None."""
    if text.startswith("if ") and text.endswith(":"):
        chains[indent] = text[3:-1]
        return text[3:-1], False
    if text.startswith("elif ") and text.endswith(":"):
        chains[indent] = chains.get(indent, "") + " / " + text[5:-1]
        return text[5:-1], False
    if text == "else:" and indent in chains:
        return "else of " + chains[indent], True
    return None


def _body(lines: list[str], number: int) -> int:
    """The line of the first statement after line ``number`` (jinja writes ``pass`` first in every arm)."""
    for k in range(number, len(lines)):
        if lines[k].strip():
            return k + 1
    return number


def _last_test_line(lines: list[str], number: int, indent: int) -> int:
    """The line of the last ``if``/``elif`` test before the ``else:`` at line ``number`` (it runs whenever the
    else is decided)."""
    for k in range(number - 2, -1, -1):
        text = lines[k].strip()
        k_indent = len(lines[k]) - len(lines[k].lstrip())
        if k_indent == indent and (text.startswith("elif ") or text.startswith("if ")):
            return k + 1
        if k_indent < indent and text:
            break
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


def _code_tree(code: CodeType) -> Iterator[CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _code_tree(const)


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


_REWRITES = (
    (re.compile(r"\(undefined\(name='(\w+)'\) if l_\d+_\w+ is missing else l_\d+_\w+\)"), r"\1"),
    (re.compile(r"environment\.getattr\(([^(),]+), '(\w+)'\)"), r"\1.\2"),
    (re.compile(r"environment\.getitem\(([^(),]+), ([^(),]+)\)"), r"\1[\2]"),
    (re.compile(r"\bl_\d+_(\w+)"), r"\1"),
)


def _template_syntax(test: str, functions: dict[str, str]) -> str:
    """A compiled test written back near template syntax: ``message.role == 'tool'``, ``content|trim``,
    ``tools is defined``."""
    out = test
    for _ in range(4):  # nested reads unfold from the inside out
        before = out
        for pattern, repl in _REWRITES:
            out = pattern.sub(repl, out)
        out = re.sub(r"\bt_\d+\(([^()]*)\)", lambda m: _function(m, functions), out)
        if out == before:
            break
    return out


def _function(match: re.Match[str], functions: dict[str, str]) -> str:
    name = match.group(0).split("(", 1)[0]
    kind, _, what = functions.get(name, "filter:" + name).partition(":")
    args = match.group(1)
    head, _, rest = args.partition(", ")
    if kind == "test":
        return f"{head} is {what}" + (f" {rest}" if rest else "")
    return f"{head}|{what}" + (f"({rest})" if rest else "")
