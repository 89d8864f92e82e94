"""How one check's findings are built and counted, from the audit's context.

``divergence`` builds a ``Finding`` at the first token where two id sequences part, and ``classify`` names the
cause from the runs that differ there (``tito_audit.report.finding_class``).

A check that compared nothing must not pass, and a render that fails inside a check must be counted, not
skipped. ``Collector`` replaces the ``finding = divergence(...); if finding: findings.append(finding)`` idiom: every
``compare`` counts one comparison, every ``failed`` one render failure, and ``outcome`` turns the counts into an
``Outcome`` (``not_applicable`` with the reason when nothing was compared).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tito_audit.report.findings import CLASS_WINDOW, CONTEXT_TOKENS, Finding, Outcome, TokenSide

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext
    from tito_audit.errors import RenderError


def window(ctx: AuditContext, ids: Sequence[int], index: int) -> tuple[int, TokenSide]:
    """The ids around ``index`` (``CONTEXT_TOKENS`` each side) and where that window starts."""
    start = max(0, index - CONTEXT_TOKENS)
    chunk = list(ids[start : index + CONTEXT_TOKENS + 1])
    return start, TokenSide(chunk, ctx.renderer.token_texts(chunk))


def divergence(
    ctx: AuditContext,
    check: str,
    scenario: str,
    expected: Sequence[int],
    actual: Sequence[int],
    message: str,
    cls: str | None = None,
    trainable: Sequence[int] | None = None,
) -> Finding | None:
    """A finding at the first token where ``actual`` departs from ``expected``; None when equal."""
    from tito_audit.report.align import count_unmatched_trainable  # (the formats import this module: kept light)
    from tito_audit.rollout.tokens import common_prefix_len

    if list(expected) == list(actual):
        return None
    index = common_prefix_len(expected, actual)
    start, exp_side = window(ctx, expected, index)
    _, act_side = window(ctx, actual, index)
    affected = 0
    if trainable is not None and ctx.options.count_lost_tokens:
        affected = count_unmatched_trainable(expected, actual, trainable)
    return Finding(
        check=check,
        scenario=scenario,
        cls=cls or classify(ctx, expected, actual, index),
        message=message,
        index=index,
        context_start=start,
        expected=exp_side,
        actual=act_side,
        affected_trainable=affected,
    )


def classify(ctx: AuditContext, expected: Sequence[int], actual: Sequence[int], index: int) -> str:
    """The cause of the divergence at ``index``: the runs that differ there (the two sequences aligned over a window
    from ``index``), named by the rule replay uses too (``finding_class.pick_class``)."""
    from difflib import SequenceMatcher

    from tito_audit.report.finding_class import pick_class, run_text

    ref, got = list(expected[index : index + CLASS_WINDOW]), list(actual[index : index + CLASS_WINDOW])
    ops = SequenceMatcher(None, ref, got, autojunk=False).get_opcodes()
    _, i1, i2, j1, j2 = next((op for op in ops if op[0] != "equal"), ("replace", 0, len(ref), 0, len(got)))
    decode = ctx.renderer.decode
    texts = (run_text(decode, expected, index + i1, index + i2), run_text(decode, actual, index + j1, index + j2))
    return pick_class(
        ref[i1:i2],
        got[j1:j2],
        texts=texts,
        stop_ids=ctx.stop_ids,
        special_ids=ctx.special_ids,
        reasoning=ctx.reasoning_marks,
    )


class Collector:
    """One check's findings, with how many things it compared and how many renders failed on the way."""

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
        finding = divergence(self.ctx, self.check, scenario, expected, actual, message, cls=cls, trainable=trainable)
        if finding is not None:
            self.findings.append(finding)
        return finding

    def compared(self, n: int = 1) -> None:
        """Count comparisons made without token windows (a probe that rendered, a rendered text searched)."""
        self.comparisons += n

    def add(self, scenario: str, cls: str, message: str, reason: str | None = None, **extra: Any) -> Finding:
        """A finding that is not a token divergence (a dropped call, a missing marker)."""
        finding = Finding(self.check, scenario, cls, message, reason=reason, **extra)
        self.findings.append(finding)
        return finding

    def keep(self, finding: Finding | None) -> Finding | None:
        """Keep a finding built elsewhere (None is ignored)."""
        if finding is not None:
            self.findings.append(finding)
        return finding

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
