"""One seed draws the same conversations whatever modules the process has loaded.

hypothesis draws, besides its own fixed constants, the literals of every module the process has imported from
outside site-packages and the standard library: importing ``tito_audit.cli`` changed the search's draws, and CI's
full test run (hundreds of modules loaded) drew otherwise than the same test alone, where a mutant of the
mutation study went SAFE. ``compat.reproducible_search`` keeps those constants out; its fallback (forced here) is
the library as it is, which the second test shows still depends on them, so that the first one can fail."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATA
from tito_audit import audit_model, compat, load
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.audit.search import counterexample_scenarios
from tito_audit.audit.search import run as search_run

BUDGET = 25


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    return load("qwen3-0.6b", chat_template_file=str(DATA / "search" / "base.jinja"))


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The key of every conversation the search plays, in order (a spy on the real ``play``)."""
    keys: list[str] = []
    real = search_run.play

    def spy(ctx, conversation, name, every_cut=False):  # type: ignore[no-untyped-def]
        keys.append(conversation.key)
        return real(ctx, conversation, name, every_cut)

    monkeypatch.setattr(search_run, "play", spy)
    yield keys


def _plays(model, drawn: list[str]) -> list[str]:  # type: ignore[no-untyped-def]
    drawn.clear()
    counterexample_scenarios(AuditContext(model, AuditOptions(scenarios="quick")), BUDGET, 0)
    return list(drawn)


def _load_constants(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, start: int) -> None:
    """Import a module of this run's own, full of the literals real code holds (what hypothesis would draw: it
    leaves out integers under 100, which it weights itself, and strings past 20 characters); each test its own
    (constants a module loaded before already holds change nothing)."""
    numbers = ", ".join(str(n) for n in range(start, start + 500, 7))
    ratios = ", ".join(f"{n / 8}" for n in range(start, start + 60))
    (tmp_path / f"{name}.py").write_text(f"NUMBERS = ({numbers})\nRATIOS = ({ratios})\nWORDS = ('Paris', 'city')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module(name)


def test_modules_loaded_between_two_searches_change_no_draw(model, drawn, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    assert compat.available("search_constants")
    first = _plays(model, drawn)
    _load_constants(tmp_path, monkeypatch, "loop_constants_a", 100)
    assert _plays(model, drawn) == first
    # the search played its sweeps and drew the rest of its budget (base.jinja is SAFE: nothing ends it early; a
    # draw that repeats an earlier one is not played again)
    assert len(first) > BUDGET // 2


def test_on_its_fallback_the_loaded_modules_change_the_draws_and_the_report_names_it(
    model, drawn, tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(compat.FALLBACK_ENV, "search_constants")
    compat.reset()
    try:
        own = model.with_template(model.chat_template, "copy")  # its provenance will name the fallback
        first = _plays(own, drawn)
        _load_constants(tmp_path, monkeypatch, "loop_constants_b", 1000)
        assert _plays(own, drawn) != first
        report = audit_model(model.with_template(model.chat_template, "again"), AuditOptions(scenarios="quick"))
        assert report.verdict == "safe" and report.scenarios["search"]["drawn"] > 0
        assert report.provenance.libraries["compat_fallbacks"] == ["search_constants"]
    finally:
        monkeypatch.delenv(compat.FALLBACK_ENV)
        compat.reset()


def test_reports_name_the_hypothesis_release_the_search_drew_with(model) -> None:  # type: ignore[no-untyped-def]
    from importlib import metadata

    report = audit_model(model.with_template(model.chat_template, "copy"), AuditOptions(scenarios="quick", search=0))
    assert report.provenance.libraries["hypothesis"] == metadata.version("hypothesis")
    assert report.provenance.libraries["compat_fallbacks"] == []
    assert "hypothesis " + metadata.version("hypothesis") in compat.versions_line()


def test_a_shrink_the_search_budget_stops_is_said_in_the_report() -> None:
    """A slow template's shrink may run out of the search's CPU on a loaded machine, where another stops later: the
    counterexample is still real, and the report says the shrink was cut (``shrink_stopped``), never silently."""
    from tito_audit.scenarios.searched import Conversation

    class Spent:
        why = "its render CPU (3.00s, on top of the template's 3s)"

        def spent(self) -> bool:
            return True

    state = search_run._State(cap=100, hit=True)
    probe = search_run._Probe(None, state, Spent(), None, ("append",), None)  # type: ignore[arg-type]
    conversation = Conversation(({"role": "user", "content": "Paris"},), (), ())
    assert probe.breaks(conversation) is False  # an unplayed candidate past the budget: the shrink ends
    assert state.shrink_stopped == Spent.why
    result = search_run.SearchResult(40, 0, ("append",), shrink_stopped=state.shrink_stopped)
    assert result.summary()["shrink_stopped"] == Spent.why


def test_the_search_gives_the_checks_back_the_cpu_they_had_even_when_its_renders_hit_the_raised_total() -> None:
    """The review's point: a play past the search's allowance could reach the raised total and stop the template
    for good, so every check after the search was refused. ``close`` sets the total back and lifts that stop: the
    checks keep exactly what they had left."""
    from types import SimpleNamespace

    from tito_audit.rendering.budget import TemplateBudget

    budget = TemplateBudget(cpu_seconds=3.0, limit_hits=2)
    budget.charge(2.9, False)  # the audit's own renders: 0.1 s left
    ctx = SimpleNamespace(renderer=SimpleNamespace(budget=budget))
    allowance = search_run._Allowance(ctx)  # type: ignore[arg-type]
    assert budget.cpu_seconds == 6.0 and allowance.cpu == 3.0
    budget.charge(3.2, False)  # the search's renders, past its allowance, up to the raised total
    assert budget.stopped is not None and allowance.spent()
    allowance.close()
    assert budget.stopped is None and abs(budget.render_seconds(2.0) - 0.1) < 1e-9
    budget.charge(0.1, False)  # the checks spend what they had: then the template stops, as it always did
    assert budget.stopped is not None


def test_a_larger_search_is_lent_more_and_the_checks_keep_what_a_default_search_leaves_them() -> None:
    """``--search 100`` gets two and a half times the default allowance, CPU and characters: a fixed share stopped
    a search of 100 after 43 draws on a plain template (red team 10 saw it at 200), where 40 drew their 40. The
    characters past the default share are lent: after the search the checks keep what a default search leaves
    them."""
    from types import SimpleNamespace

    from tito_audit.rendering.budget import TemplateBudget

    default_ctx = SimpleNamespace(renderer=SimpleNamespace(budget=TemplateBudget(3.0, 2, output_chars=1_000_000)))
    default = search_run._Allowance(default_ctx)  # type: ignore[arg-type]
    assert (default.cpu, default.chars) == (3.0, 500_000) and default_ctx.renderer.budget.output_chars == 1_000_000
    budget = TemplateBudget(cpu_seconds=3.0, limit_hits=2, output_chars=1_000_000)
    ctx = SimpleNamespace(renderer=SimpleNamespace(budget=budget))
    allowance = search_run._Allowance(ctx, 100)  # type: ignore[arg-type]
    assert (allowance.cpu, allowance.chars) == (7.5, 1_250_000)
    assert budget.output_chars == 1_750_000  # the 750,000 past the default share, lent
    budget.charge(0.5, False, 1_200_000)  # the search's renders: past the template's own total, under the loan
    assert budget.stopped is None and not allowance.spent()
    allowance.close()
    assert budget.output_chars == 1_700_000  # 500,000 charged, the 700,000 past them forgiven
    budget.charge(0.1, False, 500_000)  # the checks: what a default search leaves them (1,000,000 - 500,000)
    assert budget.stopped is None
    budget.charge(0.1, False, 1)
    assert budget.stopped is not None and "characters" in budget.stopped
