"""Measure the package's structure: what a newcomer sees when the code is drawn as a house.

    python scripts/structure.py            # the figures, one per line
    python scripts/structure.py --json     # the same as JSON (benchmarks/results/structure-*.json)

Rooms are modules and packages, arrows are imports. An import counts wherever it stands (module level, in a
function, under ``if TYPE_CHECKING:``: a type-only import is still a dependency a reader has to follow), and so
does a lazy one (a string naming a ``tito_audit`` module, an ``importlib`` call over a package). The figures:

- ``packages``: the sub-packages of ``tito_audit`` (folders with an ``__init__.py``), and ``loose_modules``: the
  modules that sit directly under ``tito_audit/``;
- ``module_cycles``: strongly connected components of the module graph (more than one module);
- ``package_cycles``: the same between top-level rooms (a top-level package, or a loose module);
- ``back_arrows``: imports from a room to a room above it in the pipeline (``LAYERS``: lower layers are the
  foundations; an arrow may only point down or sideways within a layer that allows it);
- ``largest_modules`` and ``long_functions``: lines per module (over 500) and per function, signature and
  decorators included (over 120);
- ``complex_functions``: radon's cyclomatic complexity grade E or F (when radon is installed).

The root ``tito_audit/__init__.py`` (the public API, which re-exports lazily from every layer) and ``__main__`` are
outside the layering.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tito_audit"

# Each top-level room and the layer it stands on: an import may point to the same layer or below, never above.
# Names of the layout before the restructure are kept so that the "before" figures are measured by the same rule.
LAYERS: dict[str, int] = {
    # foundations: no tito_audit import above them
    "_version": 0,
    "errors": 0,
    "compat": 0,
    "registry": 0,
    "workers": 0,
    "_quiet_transformers": 0,
    # the sandboxed renderer, then the token buffer built on it (the public library), then model loading
    "rendering": 1,
    "rollout": 2,
    "probes": 2,
    "sources": 3,
    # the report layer: what every command reports (report types, findings, the verdict rule, alignment, quoting)
    "report": 4,
    "findings": 4,
    "finding_class": 4,
    "align": 4,
    "quote": 4,
    "verdict": 4,
    "rl_artifacts": 4,
    # the audit pipeline: scenarios -> renderer adapters -> the audit (context, simulation, checks, runner)
    "scenarios": 5,
    "engines": 6,
    "audit": 7,
    "context": 7,
    "simulation": 7,
    "checks": 7,
    "formats": 8,
    # the commands' own packages, built on the pipeline
    "fix": 9,
    "scan": 9,
    "policy": 10,
    "replay": 11,
    "rl": 11,
    "gate": 12,
    "trainer": 13,
    "integrations": 13,
    "testing": 14,
    "cli": 15,
}
OUTSIDE = {"tito_audit", "tito_audit.__main__"}


def module_files() -> dict[str, Path]:
    files = {}
    for path in sorted(PACKAGE.rglob("*.py")):
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


def _walk(node: ast.AST, type_checking: bool = True) -> Iterator[ast.AST]:
    """Every node below ``node``; without ``type_checking``, the bodies of ``if TYPE_CHECKING:`` are skipped
    (they never run; their ``else`` still does)."""
    for child in ast.iter_child_nodes(node):
        if not type_checking and isinstance(child, ast.If) and _under_type_checking(child):
            for statement in child.orelse:
                yield statement
                yield from _walk(statement, type_checking)
            continue
        yield child
        yield from _walk(child, type_checking)


def imported_names(module: str, path: Path, modules: set[str], type_checking: bool = True) -> set[str]:
    """The dotted ``tito_audit`` names ``module`` imports (before resolving them to modules)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in _walk(ast.parse(path.read_text(encoding="utf-8")), type_checking):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules)
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


def import_graph(runtime: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports (resolved: ``from pkg.mod import f`` is ``pkg.mod``).

    The design graph (default) counts type-only imports and only the module named. The ``runtime`` graph is what
    Python executes: no ``if TYPE_CHECKING:`` imports, and importing ``P.Q.R`` runs ``P/__init__`` and
    ``P/Q/__init__`` first (a module depends on the packages of what it imports, not on its own packages, which
    are already loading when it runs)."""
    files = module_files()
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for name in imported_names(module, path, modules, type_checking=not runtime):
            while name not in modules:
                name = name.rpartition(".")[0]
            parts = name.split(".")
            for depth in range(1 if runtime else len(parts), len(parts) + 1):
                target = ".".join(parts[:depth])
                if target != module and not module.startswith(target + "."):
                    targets.add(target)
        graph[module] = targets
    return graph


def components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def room(module: str) -> str | None:
    """The top-level room a module stands in: ``tito_audit.replay.guard`` -> ``replay``."""
    if module in OUTSIDE:
        return None
    return module.split(".")[1]


def room_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    rooms: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = room(module)
        if source is None:
            continue
        rooms.setdefault(source, set())
        for target in targets:
            dest = room(target)
            if dest is not None and dest != source:
                rooms[source].add(dest)
    return rooms


def back_arrows(graph: dict[str, set[str]]) -> list[str]:
    """Module-level imports from a lower layer to a higher one, grouped per pair of rooms."""
    pairs: dict[tuple[str, str], list[str]] = {}
    for module, targets in graph.items():
        source = room(module)
        if source is None:
            continue
        for target in targets:
            dest = room(target)
            if dest is None or dest == source:
                continue
            if LAYERS.get(source, 99) < LAYERS.get(dest, 99):
                pairs.setdefault((source, dest), []).append(f"{module} -> {target}")
    return [f"{a} -> {b} ({len(v)}: {v[0]})" for (a, b), v in sorted(pairs.items())]


def functions(path: Path) -> Iterator[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            yield node.name, node.end_lineno - start + 1


def complexity(paths: list[Path]) -> list[str] | None:
    try:
        from radon.complexity import cc_rank, cc_visit
    except ImportError:
        return None
    found = []
    for path in paths:
        for block in cc_visit(path.read_text(encoding="utf-8")):
            if cc_rank(block.complexity) in "EF":
                found.append(f"{path.relative_to(ROOT)}:{block.name} {block.complexity}")
    return sorted(found)


def measure() -> dict[str, object]:
    files = module_files()
    graph = import_graph()
    unknown = sorted({r for m in graph if (r := room(m)) is not None and r not in LAYERS})
    lines = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in files.items()}
    long_functions = sorted(
        ((n, f"{files[m].relative_to(ROOT)}:{name}") for m in files for name, n in functions(files[m]) if n > 120),
        reverse=True,
    )
    longest = max(((n, f"{files[m].relative_to(ROOT)}:{name}") for m in files for name, n in functions(files[m])))
    largest = max((n, str(files[m].relative_to(ROOT))) for m, n in lines.items())
    cc = complexity(list(files.values()))
    return {
        "modules": len(files),
        "lines": sum(lines.values()),
        "packages": sorted(m for m, p in files.items() if p.name == "__init__.py" and m != "tito_audit"),
        "loose_modules": sorted(p.name for m, p in files.items() if p.parent == PACKAGE),
        "module_cycles": components(graph),
        "package_cycles": components(room_graph(graph)),
        "back_arrows": back_arrows(graph),
        "rooms_without_a_layer": unknown,
        "largest_module": {"path": largest[1], "lines": largest[0]},
        "modules_over_500_lines": sorted(f"{files[m].relative_to(ROOT)} {n}" for m, n in lines.items() if n > 500),
        "longest_function": {"name": longest[1], "lines": longest[0]},
        "functions_over_120_lines": [f"{name} {n}" for n, name in long_functions],
        "complex_functions_grade_e_f": cc if cc is not None else "radon not installed",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args()
    figures = measure()
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    for key, value in figures.items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"  {item}")
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
