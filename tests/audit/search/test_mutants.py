"""The mutation study's operators on the tests' SAFE template (issue 40): each effective history-only mutant is not
SAFE, each control stays SAFE. ``benchmarks/bench_mutants.py`` runs the same operators over SAFE templates of the
bundled set, the shared models and the corpus (``benchmarks/results/mutants.json``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.audit.search.mutants import OPERATORS, effective
from tests.conftest import DATA
from tito_audit import audit_model, load
from tito_audit.audit.context import AuditOptions
from tito_audit.rendering.guard import AUDIT_LIMITS

BASE = DATA / "search" / "base.jinja"


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    return load("qwen3-0.6b", chat_template_file=str(BASE))


@pytest.mark.parametrize("op", OPERATORS, ids=[op.name for op in OPERATORS])
def test_every_effective_history_mutant_is_caught_and_every_control_stays_safe(model, op) -> None:  # type: ignore[no-untyped-def]
    mutant = op.apply(model.chat_template)
    assert effective(model, mutant)  # the template keeps every field: every operator changes what it renders
    # a render budget of 30 CPU seconds: what is tested is what the search finds, not how fast a loaded machine
    # renders (the search's own CPU budget, 3 s by default, is 4x what its longest shrink here spends)
    options = AuditOptions(scenarios="quick", limits=replace(AUDIT_LIMITS, template_cpu_seconds=30.0))
    report = audit_model(model.with_template(mutant, f"mutant {op.name}"), options)
    if op.kind == "history":
        assert report.verdict in ("unsafe", "tito-required"), report.verdict_reasons
    else:
        assert report.verdict == "safe", report.verdict_reasons
        assert not any(r.startswith("not_probed:") for r in report.verdict_reasons)
