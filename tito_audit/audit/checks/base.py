"""What a check is, the registry that makes adding one a one-file change, and how one is run.

A check is a function over an ``AuditContext`` decorated with ``@check(...)``, which records its stable id,
severity, explanation, fix hint, its role in the verdict (``verdict=``: what an active finding of the check
makes the verdict at least; ``tito_audit.report.verdict.decide`` reads it from here and nowhere else) and how it is
judged on a synthesized tokenizer (``merge_dependent=``, ``approximate_classes=``). Every module in this package
is imported by ``checks/__init__.py``, so a new check is a new module and nothing else. What a check finds
(``Finding``, ``Outcome``) lives in ``tito_audit.report.findings``.

A check's page, ``docs/checks/<id>.md``, is generated from its registration (``scripts/generate_docs.py``, as ruff
generates each rule's page from the rule): the explanation and fix hint (what every report says) and the check
module's docstring (``doc``: after its first line, what a report does not carry: details, real examples).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tito_audit import registry
from tito_audit.report.check_result import CheckResult, Severity, Status, VerdictRole
from tito_audit.report.findings import Finding, Outcome

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    severity: Severity
    explanation: str
    fix_hint: str
    run: Callable[[AuditContext], Outcome]
    order: int = 100
    verdict: VerdictRole | None = None
    # On a synthesized tokenizer (``sources.synthesized``), decided by measurement (benchmarks/results/
    # synthesized-agreement.json, docs/checks.md): why the check's status does not follow the real tokenizer's
    # (then it is reported not_applicable, not run), or whether its finding classes are read from token
    # boundaries the base's merges draw (run, flagged approximate).
    merge_dependent: str | None = None
    approximate_classes: bool = False

    @property
    def verdict_bearing(self) -> bool:
        """The verdict cannot be decided without this check's result."""
        return self.verdict in ("unsafe", "tito-required") or self.severity == "error"


class _Specs(MutableMapping[str, "CheckSpec"]):
    """Check id -> spec, read live from ``tito_audit.registry.CHECKS`` (the one registry). Setting an id that is
    registered swaps its implementation (what a test's ``monkeypatch.setitem`` does); a new id registers it."""

    def __setitem__(self, key: str, spec: CheckSpec) -> None:
        if key in registry.CHECKS:
            registry.CHECKS.replace(key, spec, meta=_meta(spec))
        else:
            _register(spec)

    def __delitem__(self, key: str) -> None:
        registry.CHECKS.remove(key)

    def __getitem__(self, key: str) -> CheckSpec:
        entry = registry.CHECKS.get(key)
        if entry is None:
            raise KeyError(key)
        spec: CheckSpec = entry.obj
        return spec

    def __iter__(self) -> Iterator[str]:
        return iter(registry.CHECKS.names())

    def __len__(self) -> int:
        return len(registry.CHECKS)


REGISTRY: MutableMapping[str, CheckSpec] = _Specs()


def _meta(spec: CheckSpec) -> dict[str, Any]:
    """What the verdict rule reads of a check without importing the checks (``tito_audit.report.verdict``)."""
    return {"severity": spec.severity, "verdict": spec.verdict}


def _register(spec: CheckSpec, doc: str = "") -> None:
    registry.CHECKS.register(spec.id, spec.title, spec, doc=doc, order=spec.order, meta=_meta(spec))


def check(
    id: str,
    title: str,
    severity: Severity,
    explanation: str,
    fix_hint: str,
    order: int = 100,
    verdict: VerdictRole | None = None,
    merge_dependent: str | None = None,
    approximate_classes: bool = False,
    doc: str | None = None,
) -> Callable[[Callable[[AuditContext], Outcome]], Callable[[AuditContext], Outcome]]:
    """Register the decorated function as check ``id``. ``doc`` (default: the docstring of the module it is defined
    in) is the rest of its documentation page."""

    def register(fn: Callable[[AuditContext], Outcome]) -> Callable[[AuditContext], Outcome]:
        spec = CheckSpec(
            id,
            title,
            severity,
            " ".join(explanation.split()),
            " ".join(fix_hint.split()),
            fn,
            order,
            verdict,
            " ".join(merge_dependent.split()) if merge_dependent else None,
            approximate_classes,
        )
        module = sys.modules.get(fn.__module__)
        _register(spec, doc if doc is not None else (module.__doc__ if module is not None else None) or "")
        return fn

    return register


def status_for(spec: CheckSpec, findings: list[Finding]) -> Status:
    active = [f for f in findings if not f.suppressed]
    if not active:
        return "pass"
    return "fail" if spec.severity == "error" else "warn"


def _result(spec: CheckSpec, status: Status, summary: str, outcome: Outcome | None = None) -> CheckResult:
    """The one place a ``CheckResult`` is built: the spec's fixed fields, then what the run gave."""
    result = CheckResult(
        spec.id,
        spec.title,
        status,
        spec.severity,
        summary,
        spec.explanation,
        spec.fix_hint,
        verdict_role=spec.verdict,
    )
    if outcome is not None:
        result.data = outcome.data
        result.comparisons, result.render_failures = outcome.comparisons, outcome.render_failures
    return result


def run_check(spec: CheckSpec, ctx: AuditContext) -> CheckResult:
    """One check's result; an exception becomes status ``error``, a check that compared nothing, or fewer things
    than renders failed in it, ``not_applicable``.

    On a synthesized tokenizer a merge-dependent check is ``not_applicable`` (not run, with the reason), and every
    other check says in its ``data`` how far its result follows the real tokenizer's.
    """
    from tito_audit.sources.load import SYNTHESIZED  # (the formats import this module: no loader at import time)

    provenance = ctx.model.provenance
    if provenance is None or provenance.tokenizer != SYNTHESIZED:
        return _run(spec, ctx)
    if spec.merge_dependent is not None:
        why = f"not judged on a synthesized tokenizer (base {provenance.tokenizer_base}): {spec.merge_dependent}"
        return _result(spec, "not_applicable", why)
    result = _run(spec, ctx)
    result.data["approximate"] = (
        "synthesized tokenizer: the finding classes are read from the base's token boundaries"
        if spec.approximate_classes
        else "synthesized tokenizer: status measured to agree with the real tokenizer's"
    )
    return result


def _run(spec: CheckSpec, ctx: AuditContext) -> CheckResult:
    from tito_audit.errors import InternalError, RenderError

    try:
        outcome = spec.run(ctx)
    except RenderError as exc:
        return _result(spec, "error", f"render failed: {exc.message}")
    except InternalError as exc:  # our code or a library's, not the template: the check could not run
        if ctx.options.debug:
            raise
        return _result(spec, "error", f"internal error (not the template's): {exc.message}")
    except Exception as exc:  # a check bug must not lose the other checks' results
        if ctx.options.debug:
            raise
        return _result(spec, "error", f"{type(exc).__name__}: {exc}")
    if outcome.not_applicable is None and not outcome.findings and outcome.comparisons == 0:
        failed = f" ({outcome.render_failures} render(s) failed)" if outcome.render_failures else ""
        outcome.not_applicable = f"compared nothing{failed}"
    if outcome.not_applicable is None and not outcome.findings and outcome.render_failures > outcome.comparisons:
        # more renders failed than were compared: what did compare cannot speak for the check
        first = outcome.data.get("first_render_failure")
        outcome.not_applicable = (
            f"undecided: {outcome.render_failures} render(s) failed, only {outcome.comparisons} compared"
            + (f" (first {first})" if first else "")
        )
    if outcome.not_applicable is not None:
        return _result(spec, "not_applicable", outcome.not_applicable, outcome)
    status = status_for(spec, outcome.findings)
    summary = outcome.summary or ("no divergence" if status == "pass" else f"{len(outcome.findings)} finding(s)")
    if outcome.render_failures:
        summary += f" ({outcome.render_failures} render(s) failed and were not compared)"
    result = _result(spec, status, summary, outcome)
    result.findings = outcome.findings
    return result
