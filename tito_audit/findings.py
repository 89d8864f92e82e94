"""Collecting one check's findings while counting what it compared.

A check that compared nothing must not pass, and a render that fails inside a check must be counted, not
skipped. ``Collector`` replaces the ``f = ctx.divergence(...); if f: findings.append(f)`` idiom: every
``compare`` counts one comparison, every ``failed`` one render failure, and ``outcome`` turns the counts into an
``Outcome`` (``not_applicable`` with the reason when nothing was compared).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tito_audit.checks.base import Finding, Outcome

if TYPE_CHECKING:
    from tito_audit.context import AuditContext
    from tito_audit.rendering.renderer import RenderError


class Collector:
    def __init__(self, ctx: AuditContext, check: str) -> None:
        self.ctx = ctx
        self.check = check
        self.findings: list[Finding] = []
        self.comparisons = 0
        self.render_failures = 0
        self.first_failure: str | None = None

    def compare(
        self,
        scenario: str,
        expected: Sequence[int],
        actual: Sequence[int],
        message: str,
        cls: str | None = None,
        trainable: Sequence[int] | None = None,
    ) -> Finding | None:
        """Count one token comparison; keep and return the finding when ``actual`` departs from ``expected``."""
        self.comparisons += 1
        f = self.ctx.divergence(self.check, scenario, expected, actual, message, cls=cls, trainable=trainable)
        if f is not None:
            self.findings.append(f)
        return f

    def compared(self, n: int = 1) -> None:
        """Count comparisons made without token windows (a probe that rendered, a rendered text searched)."""
        self.comparisons += n

    def add(self, scenario: str, cls: str, message: str, reason: str | None = None, **extra: Any) -> Finding:
        """A finding that is not a token divergence (a dropped call, a missing marker)."""
        f = Finding(self.check, scenario, cls, message, reason=reason, **extra)
        self.findings.append(f)
        return f

    def keep(self, f: Finding | None) -> Finding | None:
        """Keep a finding built elsewhere (None is ignored)."""
        if f is not None:
            self.findings.append(f)
        return f

    def failed(self, scenario: str, err: RenderError) -> None:
        """A render inside the check failed: counted and reported, never skipped silently."""
        self.render_failures += 1
        if self.first_failure is None:
            self.first_failure = f"{scenario}: {err.message}"

    def outcome(self, summary: str, nothing: str, data: dict[str, Any] | None = None) -> Outcome:
        """``summary`` when something was compared; ``not_applicable`` (``nothing``, why) when nothing was."""
        data = dict(data or {})
        if self.first_failure is not None:
            data.setdefault("first_render_failure", self.first_failure)
        if self.comparisons == 0 and not self.findings:
            why = nothing
            if self.render_failures:
                why += f" ({self.render_failures} render(s) failed, first {self.first_failure})"
            return Outcome(not_applicable=why, data=data, comparisons=0, render_failures=self.render_failures)
        return Outcome(
            self.findings,
            summary,
            data=data,
            comparisons=self.comparisons,
            render_failures=self.render_failures,
        )
