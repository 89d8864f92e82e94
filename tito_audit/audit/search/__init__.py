"""The counterexample search: SAFE means no conversation breaks the property, not only that no catalogue one did.

After the checks have judged the catalogue and the derived scenarios, a template whose verdict so far is ``safe``
or ``tito-required`` is searched for a conversation that breaks what that verdict claims (``property``): buffer +
delta on a tool append for both, the naive re-render for ``safe``. Conversations are drawn by hypothesis over a
space read from the template (``space``, ``conversations``) under a budget and a seed (``run``: ``--search N``,
``--search-seed S``); a counterexample is shrunk to a minimal conversation and joins the audit's scenarios, the
checks run again, and it is shown at its first divergent token like every other finding and moves the verdict
by the same rule. A verdict the scenarios already make ``unsafe`` (or ``error``) is not searched: no
counterexample could move it. ``scenarios.search`` in the report says what was searched, or why not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tito_audit.audit.context import SEARCH_BUDGET
from tito_audit.audit.search.property import APPEND, KINDS, LOST, RERENDER, TOKEN_KINDS
from tito_audit.audit.search.result import SearchResult
from tito_audit.errors import InternalError
from tito_audit.report.check_result import CheckResult
from tito_audit.report.verdict import decide

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext
    from tito_audit.audit.coverage import Coverage
    from tito_audit.scenarios.spec import Scenario

DEFAULT_BUDGET = SEARCH_BUDGET  # conversations drawn by default (``--search``); 0 turns the search off
OFF = "off (--search 0)"
STEER_BUDGET = 20  # a search of this many conversations or more is steered by the template arms each one takes


def steers(budget: int) -> bool:
    """Whether a search of ``budget`` conversations is steered by the arms each one takes first (``run``): then
    every render's arms count as they come, and coverage plays every render through its copy."""
    return budget >= STEER_BUDGET


def wanted(verdict: str) -> tuple[str, ...]:
    """What a counterexample must break to move ``verdict``: nothing for ``unsafe`` and ``error``."""
    return {"safe": KINDS, "tito-required": (APPEND, LOST)}.get(verdict, ())


def search_after_checks(
    ctx: AuditContext,
    checks: Sequence[CheckResult],
    scenarios: Mapping[str, Any] | None,
    coverage: Coverage | None = None,
) -> SearchResult:
    """The search for ``ctx`` given the checks' results on the scenarios played so far (see the module
    docstring). ``coverage``: the template's arms, traced as the search renders (it steers towards arms not yet
    run). A failure of our code or a library's is kept in ``skipped`` (``error: ...``): the caller names it, since
    the verdict then rests on less than it claims."""
    budget, seed = ctx.options.search, ctx.options.search_seed
    if budget <= 0:
        return SearchResult(0, seed, skipped=OFF)
    verdict = decide(checks, scenarios).verdict
    kinds = wanted(verdict)
    if not kinds:
        return SearchResult(budget, seed, skipped=f"the scenarios already make the verdict {verdict}")
    from tito_audit.audit.search.run import search  # hypothesis is imported only when a search runs

    try:
        return search(ctx, budget, seed, kinds, coverage)
    except InternalError as exc:
        if ctx.options.debug:
            raise
        return SearchResult(budget, seed, skipped=f"error: {exc.message}")


def counterexample_scenarios(ctx: AuditContext, budget: int, seed: int) -> tuple[list[Scenario], SearchResult]:
    """The search for every kind of counterexample the trained tokens show, whatever the scenarios say (what
    ``tito-audit rl`` plays: a re-render break is a trained-token fact there; a lost value is the audit's, not a
    token's), and the scenarios of what it found; an empty list with ``skipped`` said when it is off or failed."""
    if budget <= 0:
        return [], SearchResult(0, seed, skipped=OFF)
    from tito_audit.audit.search.run import search

    try:
        result = search(ctx, budget, seed, TOKEN_KINDS)
    except InternalError as exc:
        return [], SearchResult(budget, seed, skipped=f"error: {exc.message}")
    return [p.simulation.scenario for p in result.found], result


__all__ = [
    "APPEND",
    "DEFAULT_BUDGET",
    "KINDS",
    "LOST",
    "OFF",
    "RERENDER",
    "SearchResult",
    "counterexample_scenarios",
    "search_after_checks",
]
