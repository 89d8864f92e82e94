"""The package's structure, measured by ``scripts/structure.py`` (the one implementation of the import graph).

Two graphs are read from the source with ``ast``:

- the *runtime* graph, what Python executes (function-level imports count, ``if TYPE_CHECKING:`` ones do not,
  and importing ``P.Q.R`` runs the ``__init__`` of ``P`` and ``P.Q`` first): it must have no cycle, or some
  import order fails;
- the *design* graph, what a reader follows (type-only imports count too): no cycle between modules or between
  top-level rooms, and no arrow from a lower layer of the pipeline to a higher one (``structure.LAYERS``).

Lazy imports count in both: a string constant that names a ``tito_audit`` module (the root's ``_EXPORTS``) and
``importlib.import_module(f"{__name__}.{x}")`` over a package.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("structure", ROOT / "scripts" / "structure.py")
assert _spec is not None and _spec.loader is not None
structure = importlib.util.module_from_spec(_spec)
sys.modules["structure"] = structure
_spec.loader.exec_module(structure)

MAX_LOOSE_MODULES = 6  # modules directly under tito_audit/ (issue 37)


def test_the_package_has_no_runtime_import_cycle() -> None:
    found = structure.components(structure.import_graph(runtime=True))
    assert not found, f"runtime import cycles in tito_audit/: {found}"


def test_no_cycle_between_modules_or_rooms_in_the_design_graph() -> None:
    graph = structure.import_graph()
    assert structure.components(graph) == []
    assert structure.components(structure.room_graph(graph)) == []


def test_no_arrow_runs_back_up_the_pipeline() -> None:
    graph = structure.import_graph()
    assert structure.back_arrows(graph) == []
    unknown = sorted({r for m in graph if (r := structure.room(m)) is not None and r not in structure.LAYERS})
    assert unknown == [], f"rooms without a layer in scripts/structure.py LAYERS: {unknown}"


def test_few_loose_modules() -> None:
    loose = structure.measure()["loose_modules"]
    assert len(loose) <= MAX_LOOSE_MODULES, loose


def test_no_module_or_function_is_too_long() -> None:
    """One concept per module (issue 37): a module past 500 lines or a function past 120, signature and decorators
    included (a typer signature counts), is split (``structure.measure``)."""
    sizes = structure.measure()
    assert sizes["modules_over_500_lines"] == [], sizes["modules_over_500_lines"]
    assert sizes["functions_over_120_lines"] == [], sizes["functions_over_120_lines"]


def test_the_public_library_does_not_import_the_audit() -> None:
    """``rollout`` (the ``Trajectory`` RL frameworks import) stands below the checks and the audit."""
    for module, targets in structure.import_graph(runtime=True).items():
        if module.startswith("tito_audit.rollout"):
            bad = {t for t in targets if t.startswith(("tito_audit.audit", "tito_audit.report"))}
            assert not bad, f"{module} imports {sorted(bad)}"


def test_the_graph_sees_every_kind_of_import() -> None:
    """The rules find real edges: a lazy export, a dynamic package import, an f-string prefix."""
    graph = structure.import_graph()
    assert "tito_audit.audit.runner" in graph["tito_audit"]  # the root's lazy ``_EXPORTS``
    assert "tito_audit.audit.checks.roundtrip" in graph["tito_audit.audit.checks"]  # importlib over the package
    assert "tito_audit.cli.scan" in graph["tito_audit.cli"]  # importlib with an f-string prefix
    assert structure.components({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_type_checking_imports_count_in_the_design_graph_only(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from tito_audit.audit.runner import audit_model\n"
        "def later():\n    from tito_audit.audit.checks.base import run_check\n",
        encoding="utf-8",
    )
    modules = set(structure.module_files())
    runtime = structure.imported_names("tito_audit.probe", source, modules, type_checking=False)
    design = structure.imported_names("tito_audit.probe", source, modules)
    assert runtime == {"tito_audit.audit.checks.base"}
    assert design == {"tito_audit.audit.checks.base", "tito_audit.audit.runner"}


def test_a_back_arrow_is_found() -> None:
    """A lower layer importing a higher one is reported with the module that does it."""
    arrows = structure.back_arrows({"tito_audit.report.verdict": {"tito_audit.audit.checks.base"}})
    assert arrows == ["report -> audit (1: tito_audit.report.verdict -> tito_audit.audit.checks.base)"]
