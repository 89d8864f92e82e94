"""A finding in words: the finding that best explains a check, and the first divergent text of its windows.

Kept in one place so the Markdown report, the compatibility table, HTML and SARIF all describe a finding in
the same words.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tito_audit.report.check_result import CheckResult
    from tito_audit.report.findings import Finding


def first_active(c: CheckResult) -> Finding | None:
    """The finding that best explains a check: the first unsuppressed one with token windows, else any."""
    active = c.active_findings
    with_tokens = [f for f in active if f.expected is not None and f.actual is not None]
    shown = with_tokens or active
    return shown[0] if shown else None


@dataclass(frozen=True)
class Divergence:
    """The first differing run of tokens on each side of a finding."""

    buffered: list[str]
    rerendered: list[str]

    def sentence(self, quote: Callable[[str], str] = repr) -> str:
        left, right = "".join(self.buffered), "".join(self.rerendered)
        if left != right:
            return f"buffer has {quote(left)} where the re-render has {quote(right)}"
        # Same text, different split: the divergence is in the tokenization, so show the pieces.
        split_l = " + ".join(quote(t) for t in self.buffered)
        split_r = " + ".join(quote(t) for t in self.rerendered)
        return f"buffer has {split_l} where the re-render has {split_r} (same text, different tokens)"


def divergence(f: Finding) -> Divergence | None:
    """Align both windows at the first divergent token and take the first non-matching run (difflib)."""
    if f.expected is None or f.actual is None:
        return None
    exp_ids, act_ids = f.expected.ids, f.actual.ids
    if f.index is not None and f.context_start is not None:
        k0 = max(0, f.index - f.context_start)
    else:
        k0 = next((k for k, (a, b) in enumerate(zip(exp_ids, act_ids, strict=False)) if a != b), 0)
    exp_tail, act_tail = exp_ids[k0:], act_ids[k0:]
    matcher = difflib.SequenceMatcher(None, exp_tail, act_tail, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            return Divergence(f.expected.tokens[k0 + i1 : k0 + i2], f.actual.tokens[k0 + j1 : k0 + j2])
    return None


def finding_sentence(f: Finding, quote: Callable[[str], str] = repr) -> str:
    """One sentence: the finding's message plus, when the windows allow, the first divergent text."""
    where = f" at token {f.index}" if f.index is not None else ""
    d = divergence(f)
    tail = f"; {d.sentence(quote)}" if d is not None else ""
    return f"{f.scenario}{where}: {f.message}{tail}."
