"""No import cycles in ``tito_audit/``: every module's imports are read with ``ast`` and the graph must be acyclic.

What counts as "module A imports module B" (an import hidden in a function is still an import, so it counts):

- ``import``/``from ... import`` anywhere in A (module level, in functions, in ``try``), except under
  ``if TYPE_CHECKING:``, which never runs. ``from P import name`` imports ``P.name`` when that is a module, else
  ``P``.
- Importing ``P.Q.R`` runs ``P/__init__`` and ``P/Q/__init__`` first: a module depends on the packages of what
  it imports (not on its own packages, which are already loading when it runs).
- Lazy imports: a string constant that names a ``tito_audit`` module (``_EXPORTS`` maps in package
  ``__init__`` files), and ``importlib.import_module(f"{__name__}.{x}")`` / ``(f"tito_audit.pkg.{x}")``, which
  import every module directly in that package.

A cycle is reported with the modules it runs through, so whoever adds one sees where to cut.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import tito_audit

PACKAGE = Path(tito_audit.__file__).resolve().parent


def module_files() -> dict[str, Path]:
    files = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["tito_audit", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    return files


def _under_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node``, skipping the bodies of ``if TYPE_CHECKING:`` (their ``else`` still runs)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _under_type_checking(child):
            for statement in child.orelse:
                yield statement
                yield from _walk(statement)
            continue
        yield child
        yield from _walk(child)


def imported_names(module: str, path: Path, modules: set[str]) -> set[str]:
    """The dotted names ``module`` imports (before resolving them to modules)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in _walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
            names.add(node.value)
        elif isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            prefix = None
            if (
                isinstance(head, ast.FormattedValue)
                and isinstance(head.value, ast.Name)
                and head.value.id == "__name__"
            ):
                prefix = module + "."
            elif (
                isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.startswith("tito_audit.")
            ):
                prefix = head.value
            if prefix is not None and prefix.endswith("."):
                names.update(m for m in modules if m.startswith(prefix) and "." not in m[len(prefix) :])
    return {n for n in names if n == "tito_audit" or n.startswith("tito_audit.")}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets: set[str] = set()
        for name in imported_names(module, path, modules):
            while name not in modules:  # ``from pkg.mod import function``: the module is ``pkg.mod``
                name = name.rpartition(".")[0]
            parts = name.split(".")
            for depth in range(1, len(parts) + 1):  # the packages that importing ``name`` runs first
                target = ".".join(parts[:depth])
                if target != module and not module.startswith(target + "."):
                    targets.add(target)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module."""
    return [_one_cycle(graph, component) for component in components(graph)]


def components(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside the component."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    return [*paths[node], start]
                if target not in paths:
                    paths[target] = [*paths[node], target]
                    following.append(target)
        frontier = following
    raise AssertionError("a strongly connected component always holds a cycle")


# Cycles that are known and not yet cut (none today), each with the edge to cut. Listed, not hidden:
# a new cycle fails the test, and so does a listed one that no longer exists (delete its entry then).
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph()
    found = [_one_cycle(graph, c) for c in components(graph) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import cycles in tito_audit/:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


def test_every_known_cycle_still_exists() -> None:
    """A cycle that was cut leaves the list, so that it cannot come back unnoticed."""
    found = {frozenset(component) for component in components(import_graph())}
    gone = [sorted(known) for known in KNOWN_CYCLES if known not in found]
    assert not gone, f"no longer cycles, delete them from KNOWN_CYCLES: {gone}"


def test_the_public_library_does_not_import_the_audit() -> None:
    """``rollout`` (the ``Trajectory`` RL frameworks import) stands below the checks and the audit."""
    graph = import_graph()
    for module, targets in graph.items():
        if module.startswith("tito_audit.rollout"):
            bad = {t for t in targets if t.startswith(("tito_audit.checks", "tito_audit.audit", "tito_audit.context"))}
            assert not bad, f"{module} imports {sorted(bad)}"


def test_the_graph_sees_every_kind_of_import() -> None:
    """The rules above find real edges: a function-level import, a lazy export, a dynamic package import."""
    graph = import_graph()
    assert "tito_audit.audit" in graph["tito_audit"]  # the root's lazy ``_EXPORTS``
    assert "tito_audit.checks.roundtrip" in graph["tito_audit.checks"]  # importlib over the package
    assert "tito_audit.cli.scan" in graph["tito_audit.cli"]  # importlib with an f-string prefix
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_function_level_imports_count_and_type_checking_imports_do_not(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tito_audit.audit import audit\n"
        "def later():\n    from tito_audit.checks.base import Finding\n",
        encoding="utf-8",
    )
    modules = set(module_files())
    assert imported_names("tito_audit.probe", source, modules) == {"tito_audit.checks.base"}
