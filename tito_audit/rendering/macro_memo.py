"""Macros of coverage's instrumented copy that render the same text for the same inputs, rendered once.

A template's macros mostly write tool declarations: gpt-oss-20b writes each tool's parameters as TypeScript in a
recursive macro, and every render of every prefix of every conversation the search plays writes them again (a
sixth of that audit's time). A macro whose text depends only on what it is called with gives the same text for the
same arguments, so the instrumented copy renders it once per distinct call and reuses the text (``MacroMemo``).

Only a macro that provably depends on nothing else is memoized (``memoize_macros``, read off the code jinja compiled
the template to): every name it reads is its own (parameters, locals), jinja's runtime, a filter or test known to be
pure (never ``random``, never ``sameas``: an identity no key of values tells; ``map``, ``select`` and their kin only
with a constant name, since ``map(f)`` may be ``random``), another such macro defined before it in the template's
own body (one defined later is undefined in an earlier call), or a template variable read by ``resolve('NAME')``,
whose value at the call is part of the key, like the autoescaping at the call (``join`` writes what it says).
``context`` is read only for its ``eval_ctx`` or handed to a sandboxed call. A call is reused only where every
argument and every variable read is plain data (``marshal`` writes it: str, numbers, booleans, None, lists, dicts;
the types stay apart), or one of the environment's own pure globals (``namespace``, ``raise_exception``, ``range``,
``dict``, ``joiner``, ``cycler``); any other value (an undefined, a namespace object, a caller, ``strftime_now``)
renders the macro as usual. A call that raises is not kept.

The memo must not change how deep a render may go either: a reused text skips the frames its render took, so it is
reused only where the stack is no deeper than where that render completed, and the memo's own frame per call may
run a deep render out of stack first, so coverage renders such a render again without the memo
(``audit.coverage.Coverage.play``). A key that may hold a NaN reuses nothing (``x in xs`` tells two NaN objects
apart by identity). Red teams 45 and 46 found each of these by rendering with and without the memo
(``tests/rendering/test_macro_memo.py``).

The arms a call takes are kept with its text and counted again where the text is reused, so coverage counts what
it counts without the memo (``Recorder.ran``). Only the instrumented copy memoizes: the checks render through
transformers' own compiled template.
"""

from __future__ import annotations

import ast
import marshal
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

from jinja2.filters import FILTERS
from jinja2.runtime import missing

MEMO = "__tito_memo__"  # the render variable an instrumented template's macros are memoized through
MAX_ENTRIES = 4096  # distinct calls kept per template; past it, calls render as usual
# the filters whose result depends on their input alone: jinja's own but ``random``, and transformers' ``tojson``
PURE_FILTERS = frozenset(FILTERS) - {"random"} | {"tojson"}
# filter and test names a macro may not use, even spelled as a constant (``map('random')``, ``select('sameas', x)``)
IMPURE_NAMES = frozenset({"random", "sameas"})
# the filters handed another filter's or test's name, and its index in jinja's call ``t_N(context, value, ...)``
_NAME_ARGUMENT = {"map": 2, "select": 2, "reject": 2, "selectattr": 3, "rejectattr": 3}
# the environment's globals a macro may read that give the same thing on every render (keyed by their name)
PURE_GLOBALS = frozenset({"namespace", "raise_exception", "range", "dict", "joiner", "cycler"})
# names jinja's compiled code binds that read nothing of the render: its runtime and a few builtins
_RUNTIME = frozenset(
    {
        "LoopContext", "Markup", "Namespace", "TemplateNotFound", "TemplateReference", "TemplateRuntimeError",
        "Undefined", "escape", "identity", "internalcode", "markup_join", "missing", "str_join",
        "environment", "undefined", "concat", "cond_expr_undefined",
        "str", "len", "isinstance", "bool", "int", "float", "list", "dict", "tuple", "__tito_probe__",
    }
)  # fmt: skip
# a float in ``marshal`` format 2: ``g`` and 8 little-endian bytes; all exponent bits set: not finite
_NOT_FINITE = re.compile(rb"g[\x00-\xff]{6}[\xf0-\xff][\x7f\xff]", re.DOTALL)
_ENVIRONMENT_READS = frozenset({"getattr", "getitem", "call", "undefined"})
_CONTEXT_READS = frozenset({"eval_ctx", "call"})


class MacroMemo:
    """The texts of the memoized macros' calls over every render of one template, and the arms each took
    (``recorder``: coverage's ``Recorder``, whose ``ran`` a reused call adds its arms to)."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder
        # by key: the text, the arms the call took, and the stack depth it was rendered at (``_depth``)
        self.texts: dict[bytes, tuple[str, frozenset[int], int]] = {}
        self.hits = 0

    def wrap(
        self, function: Callable[..., str], name: str, resolve: Callable[[str], Any], reads: tuple[str, ...]
    ) -> Callable[..., str]:
        """``function`` (the compiled body of macro ``name``), rendered once per distinct arguments, values of the
        template variables it ``reads`` (``resolve``: the render's own lookup) and autoescaping at the call (an
        ``{% autoescape %}`` block changes what ``join`` and ``replace`` write)."""
        context = getattr(resolve, "__self__", None)  # ``context.resolve_or_missing``'s context
        if context is None or _FRAME is None:  # no stack to measure (a Python without ``sys._getframe``): no memo
            return function
        env_globals = context.environment.globals

        def call(*args: Any) -> str:
            escape = (context.eval_ctx.autoescape, context.eval_ctx.volatile)
            key = _key(name, escape, args, [(n, resolve(n)) for n in reads], env_globals)
            if key is None:
                return function(*args)
            hit = self.texts.get(key)
            recorder = self.recorder
            # a reused text skips the frames its render took: only where it is no deeper in the stack than where
            # that render completed (so the render itself would complete here too, with fewer frames: the memo's
            # own are not in it); a render that runs out of stack only with the memo's frames is rendered again
            # without it (``audit.coverage.Coverage.play``)
            if hit is not None and _shallower_than(hit[2]):
                self.hits += 1
                recorder.ran |= hit[1]
                return hit[0]
            outer, recorder.ran = recorder.ran, set()
            try:
                text = function(*args)
            finally:
                arms, recorder.ran = recorder.ran, outer | recorder.ran
            if len(self.texts) < MAX_ENTRIES and type(text) is str:
                self.texts[key] = (text, frozenset(arms), _depth())
            return text

        return call


_FRAME = getattr(sys, "_getframe", None)  # CPython's; where absent, ``wrap`` memoizes nothing


def _depth() -> int:
    """How many frames this thread's stack holds here."""
    frame, depth = sys._getframe(1), 1
    while frame.f_back is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


def _shallower_than(depth: int) -> bool:
    """Whether this thread's stack holds no more frames here than ``depth`` (as ``_depth`` counts them)."""
    try:
        sys._getframe(depth + 1)  # one frame more than ``_depth`` counts from ``call``: this function's own
    except ValueError:
        return True
    return False


def _key(
    name: str, escape: tuple[bool, bool], args: tuple[Any, ...], reads: list[tuple[str, Any]], env_globals: Any
) -> bytes | None:
    """The memo key of a call: its autoescaping, its arguments and the variables it reads, each tagged (0: not
    given; 1: plain data; 2: the environment's own pure global of that name); None where one is none of these."""
    parts: list[Any] = [name, escape]
    for read, value in reads:
        if value is missing:
            parts.append((0,))
        elif read in PURE_GLOBALS and value is env_globals.get(read, missing):
            parts.append((2, read))
        else:
            parts.append((1, value))
    parts.extend((0,) if a is missing else (1, a) for a in args)
    try:
        key = marshal.dumps(parts, 2)
    except ValueError:
        return None
    # a NaN is not equal to itself, so ``in``, ``==`` on lists and ``unique`` tell two NaN objects apart by identity,
    # which the key cannot: a key that may hold one (a float not finite, or bytes that look like one) reuses nothing
    return None if _NOT_FINITE.search(key) else key


def memoize_macros(tree: ast.Module) -> list[str]:
    """Wrap each macro of ``tree`` (jinja's compiled code) that depends only on its inputs in the render's
    ``MacroMemo`` (where the render passes one as ``MEMO``); returns their names."""
    nodes, owned = _walk(tree)
    filters = _pure_names(nodes)
    assigned = _assignments(nodes)
    found = _macros(nodes, assigned)
    # a variable the root resolved once and never set: a macro reading its ``l_0_NAME`` reads ``resolve('NAME')``
    resolved = {name for name, kinds in assigned.items() if set(kinds) == {"resolve"}}
    reads: dict[str, tuple[set[str], set[str]] | None] = {}
    for name, (func, _) in found.items():
        read = _reads(func, owned[id(func)], filters)
        if read is not None:
            read = (read[0] | (read[1] & resolved), read[1] - resolved)
        reads[name] = read
    eligible = {name for name, r in reads.items() if r is not None}
    root = next((f.body for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "root"), None)

    def defined_before(callee: str, caller: str) -> bool:
        """``callee`` is defined whenever ``caller`` runs: itself, or defined first, in the template's own body
        (not in an ``{% if %}``): a macro defined after a call of its caller is undefined in that call."""
        func, body = found[callee]
        return callee == caller or (body is root and func.lineno < found[caller][0].lineno)

    changed = True
    while changed:  # a macro that calls one not memoizable is not memoizable; its reads include its callees'
        changed = False
        for name in sorted(eligible):
            names, calls = reads[name]  # type: ignore[misc]
            if not calls <= eligible or not all(defined_before(c, name) for c in calls):
                eligible.discard(name)
                changed = True
                continue
            merged = names.union(*(reads[c][0] for c in calls))  # type: ignore[index]
            if merged != names:
                reads[name] = (merged, calls)
                changed = True
    for name in sorted(eligible):
        func, body = found[name]
        names = tuple(sorted(reads[name][0]))  # type: ignore[index]
        body.insert(body.index(func) + 1, _wrap_statement(name, names, func))
    if eligible:
        bind_from_context(nodes, MEMO, MEMO)
    return sorted(eligible)


def _walk(tree: ast.Module) -> tuple[list[ast.AST], dict[int, list[ast.AST]]]:
    """Every node of ``tree``, and those of each outermost ``def macro`` by its id: one pass (a corpus template's
    compiled code has tens of thousands of nodes; ``ast.walk`` once per question cost a scan seconds)."""
    nodes: list[ast.AST] = []
    owned: dict[int, list[ast.AST]] = {}
    stack: list[tuple[ast.AST, list[ast.AST] | None]] = [(tree, None)]
    while stack:
        node, owner = stack.pop()
        nodes.append(node)
        if owner is None and type(node) is ast.FunctionDef and node.name == "macro":
            owner = owned.setdefault(id(node), [])
        if owner is not None:
            owner.append(node)
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                stack.extend((item, owner) for item in value if isinstance(item, ast.AST))
            elif isinstance(value, ast.AST):
                stack.append((value, owner))
    return nodes, owned


def _macros(nodes: list[ast.AST], assigned: dict[str, list[str]]) -> dict[str, tuple[ast.FunctionDef, list[ast.stmt]]]:
    """Each macro defined once, by its name: the ``def macro`` jinja writes and the body holding it; its
    ``l_0_NAME`` assigned only by the ``Macro(...)`` that follows it (and jinja's ``= missing`` before it)."""
    out: dict[str, tuple[ast.FunctionDef, list[ast.stmt]]] = {}
    for node in nodes:
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for i, stmt in enumerate(body[:-1]):
                if type(stmt) is not ast.FunctionDef or stmt.name != "macro":
                    continue
                # jinja writes ``context.exported_vars.add(NAME)`` between the def and the ``Macro(...)`` at the top
                name = _macro_name(body[i + 1]) or (_macro_name(body[i + 2]) if i + 2 < len(body) else None)
                if name is not None:
                    out[name] = (stmt, body)
    # a name jinja assigns one ``Macro(...)`` is defined once (a second definition is a second assignment)
    return {n: v for n, v in out.items() if assigned.get(n) == ["macro"]}


def _assignments(nodes: list[ast.AST]) -> dict[str, list[str]]:
    """How the root sets each ``l_0_NAME``, in order: "macro" (``Macro(...)``), "resolve" (``resolve('NAME')``, the
    variable read from the render), "other"; jinja's ``l_0_A = l_0_B = missing`` before the template runs is left
    out."""
    kinds: dict[str, list[str]] = {}
    plain: set[int] = set()  # the targets of an ``Assign`` (judged by their value); any other store is "other"
    for node in nodes:
        if type(node) is not ast.Assign:
            continue
        plain.update(id(t) for t in node.targets)
        value = node.value
        if isinstance(value, ast.Name) and value.id == "missing":
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and target.id.startswith("l_0_"):
                name = target.id[4:]
                kind = "resolve" if _resolves(value, name) else "macro" if _macro_call(value) else "other"
                kinds.setdefault(name, []).append(kind)
    for node in nodes:
        if not isinstance(node, ast.Name) or id(node) in plain or not node.id.startswith("l_0_"):
            continue
        if isinstance(node.ctx, ast.Store | ast.Del):
            kinds.setdefault(node.id[4:], []).append("other")
    return kinds


def _macro_call(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "Macro"


def _resolves(value: ast.expr, name: str) -> bool:
    """Whether ``value`` is ``resolve('name')``."""
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "resolve"
        and len(value.args) == 1
        and isinstance(value.args[0], ast.Constant)
        and value.args[0].value == name
    )


def _macro_name(stmt: ast.stmt) -> str | None:
    """``NAME`` of ``... = l_0_NAME = Macro(environment, macro, 'NAME', ...)``, or None."""
    value = getattr(stmt, "value", None)
    if (
        type(stmt) is ast.Assign
        and isinstance(value, ast.Call)
        and _macro_call(value)
        and len(value.args) > 2
        and isinstance(value.args[1], ast.Name)
        and value.args[1].id == "macro"
        and isinstance(value.args[2], ast.Constant)
        and isinstance(value.args[2].value, str)
        and any(isinstance(t, ast.Name) and t.id == "l_0_" + value.args[2].value for t in stmt.targets)
    ):
        return value.args[2].value
    return None


def _pure_names(nodes: list[ast.AST]) -> dict[str, str]:
    """The ``t_N`` names bound to a pure filter (``PURE_FILTERS``) or a test but ``sameas`` (an identity, which no
    key of values can tell), and bound to nothing else: each with its filter's or test's name."""
    bound: dict[str, set[str | None]] = {}
    for node in nodes:
        if type(node) is ast.Assign and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound.setdefault(node.targets[0].id, set()).add(_filter_or_test(node.value))
        elif type(node) is ast.FunctionDef:
            bound.setdefault(node.name, set()).add("")  # jinja's stand-in for a filter the environment lacks
    pure: dict[str, str] = {}
    for n, names in bound.items():
        named = names - {""}
        if len(named) == 1 and None not in named:
            pure[n] = str(next(iter(named)))
    return pure


def _filter_or_test(value: ast.expr) -> str | None:
    """The name of the pure filter (``environment.filters['NAME']``) or test (``environment.tests['NAME']``,
    ``sameas`` excepted) ``value`` looks up, else None."""
    if (
        isinstance(value, ast.Subscript)
        and isinstance(value.value, ast.Attribute)
        and isinstance(value.value.value, ast.Name)
        and value.value.value.id == "environment"
        and isinstance(value.slice, ast.Constant)
        and isinstance(value.slice.value, str)
    ):
        kind, name = value.value.attr, value.slice.value
        if (kind == "tests" and name not in IMPURE_NAMES) or (kind == "filters" and name in PURE_FILTERS):
            return name
    return None


def _named_at_run_time(node: ast.Call, pure: dict[str, str]) -> bool:
    """Whether ``node`` calls a filter that is handed the name of another filter or test (``map``, ``select``,
    ``reject``, ``selectattr``, ``rejectattr``) with a name that is not a constant (``map(f)`` may be ``random``), that
    is one of those filters again (``map('map', f)``), or that may be in a starred list (red team 46)."""
    if not isinstance(node.func, ast.Name) or node.func.id not in pure:
        return False
    at = _NAME_ARGUMENT.get(pure[node.func.id])  # jinja passes (context, value, ...): the name's index
    if at is None:
        return False
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return True  # ``selectattr(*spec)``: the name is in the list
    if len(node.args) <= at:
        return False
    name = node.args[at]
    # ``map('map', f)``: the filter named hands the next argument on as a name in turn
    return not isinstance(name, ast.Constant) or name.value in _NAME_ARGUMENT


def _reads(func: ast.FunctionDef, nodes: list[ast.AST], pure: dict[str, str]) -> tuple[set[str], set[str]] | None:
    """The template variables ``func`` (its ``nodes``) reads (``resolve('NAME')``) and the macros it calls
    (``l_0_NAME``), or None where it reads anything else of the render (a variable of an enclosing scope,
    ``context.vars``, an unknown filter or attribute of the environment)."""
    local = {a.arg for a in (*func.args.args, *func.args.kwonlyargs)}
    for node in nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            local.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.Lambda) and node is not func:
            local.update(a.arg for a in node.args.args)
            if isinstance(node, ast.FunctionDef):
                local.add(node.name)
        elif isinstance(node, ast.arg):
            local.add(node.arg)
    reads: set[str] = set()
    calls: set[str] = set()
    resolved: set[int] = set()  # the ``resolve`` names that are the callee of a ``resolve('NAME')``
    for node in nodes:
        if isinstance(node, ast.Constant) and node.value in IMPURE_NAMES:
            return None  # ``map('random')``, ``select('sameas', x)``
        if isinstance(node, ast.Call) and _named_at_run_time(node, pure):
            return None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "resolve":
            if len(node.args) != 1 or node.keywords or not isinstance(node.args[0], ast.Constant):
                return None
            reads.add(str(node.args[0].value))
            resolved.add(id(node.func))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = node.value.id
            if base == "environment" and node.attr not in _ENVIRONMENT_READS:
                return None
            if base == "context" and node.attr not in _CONTEXT_READS:
                return None
    for node in nodes:
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load) or node.id in local:
            continue
        name = node.id
        if name == "resolve":
            if id(node) not in resolved:
                return None
        elif name.startswith("l_0_"):
            calls.add(name[4:])
        elif name not in _RUNTIME and name not in pure and name != "context":
            return None
    return reads, calls


def _wrap_statement(name: str, reads: tuple[str, ...], at: ast.stmt) -> ast.stmt:
    """``if __tito_memo__ is not None: macro = __tito_memo__.wrap(macro, NAME, resolve, READS)``."""
    memo = ast.Name(MEMO, ast.Load())
    wrap = ast.Call(
        ast.Attribute(memo, "wrap", ast.Load()),
        [
            ast.Name("macro", ast.Load()),
            ast.Constant(name),
            ast.Name("resolve", ast.Load()),
            ast.Tuple([ast.Constant(r) for r in reads], ast.Load()),
        ],
        [],
    )
    test = ast.Compare(ast.Name(MEMO, ast.Load()), [ast.IsNot()], [ast.Constant(None)])
    stmt = ast.If(test, [ast.Assign([ast.Name("macro", ast.Store())], wrap)], [])
    return ast.fix_missing_locations(ast.copy_location(stmt, at))


def bind_from_context(nodes: Iterable[ast.AST], local: str, key: str) -> None:
    """``local = context.get(key)`` first in each function of ``nodes`` (jinja's compiled code) that has the render's
    ``context`` (the root and blocks): a render variable read once per call, found by the functions nested in it
    (macros, loop filters) as a closure's. Coverage's probe is bound so, and the memo (``wrap`` statements follow
    the macros those functions define)."""
    for node in nodes:
        if type(node) is ast.FunctionDef and any(a.arg == "context" for a in node.args.args) and node.body:
            get = ast.Attribute(ast.Name("context", ast.Load()), "get", ast.Load())
            bind = ast.Assign([ast.Name(local, ast.Store())], ast.Call(get, [ast.Constant(key)], []))
            node.body.insert(0, ast.fix_missing_locations(ast.copy_location(bind, node.body[0])))
