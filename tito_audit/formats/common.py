"""What every human-readable format shares: status symbols, the model label and the first divergent text.

Kept in one place so the Markdown report, the compatibility table, HTML and SARIF all describe a finding in
the same words.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

from tito_audit.audit import ModelReport
from tito_audit.checks.base import CheckResult
from tito_audit.findings import Finding
from tito_audit.verdict import MIN_COVERAGE, describe_reason

STATUS_ICON = {"pass": "✅", "warn": "⚠️", "fail": "❌", "not_applicable": "n/a", "error": "💥"}
STATUS_WORD = {"pass": "pass", "warn": "warn", "fail": "fail", "not_applicable": "n/a", "error": "error"}
VERDICT_ICON = {"safe": "✅", "tito-required": "⚠️", "unsafe": "❌", "error": "💥"}
# Whitespace made visible in token strips: a newline or a leading space is the usual culprit of a divergence.
VISIBLE_WS = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def model_label(m: ModelReport) -> str:
    """Name as given, never an absolute path (local folders show their folder name only)."""
    if m.provenance is not None and m.provenance.source == "local":
        return PurePath(m.model).name or m.model
    if m.provenance is None and PurePath(m.model).is_absolute():
        return PurePath(m.model).name or m.model
    return m.model


def approximate_note(m: ModelReport) -> str | None:
    """One line for a verdict given on a synthesized tokenizer (``sources.synthesized``); None for a real one."""
    p = m.provenance
    if p is None or p.tokenizer != "synthesized":
        return None
    added = ", ".join(p.synthesized_tokens[:4]) + (" ..." if len(p.synthesized_tokens) > 4 else "")
    return (
        f"approximate verdict: tokenizer synthesized from the template's control tokens ({added or 'none'}) "
        f"on base {p.tokenizer_base}; merge-dependent checks not judged"
    )


def verdict_reasons_text(m: ModelReport) -> str:
    """The verdict's reasons in words, for the verdict line ("" when there are none)."""
    return "; ".join(describe_reason(r) for r in m.verdict_reasons)


def coverage_text(m: ModelReport) -> str:
    """Scenarios played out of the catalogue and the adaptations used; says so when fewer than MIN_COVERAGE."""
    s = m.scenarios
    if not s or "catalogue" not in s:
        return ""
    text = f"{s.get('played', 0)}/{s['catalogue']} scenarios played"
    if s.get("adaptations"):
        text += f"; adaptations: {', '.join(s['adaptations'])}"
    if s.get("low_coverage"):
        text += f"; fewer than {MIN_COVERAGE} played: the verdict rests on few conversations"
    return text


def short_revision(m: ModelReport, n: int = 7) -> str | None:
    rev = m.provenance.revision if m.provenance else None
    return rev[:n] if rev else None


def template_origin(m: ModelReport) -> str:
    """The template's file name relative to the model folder (an absolute ``--chat-template`` path is cut)."""
    if m.provenance is None:
        return ""
    origin = m.provenance.template_file
    return PurePath(origin).name if PurePath(origin).is_absolute() else origin


def verdict_reasons(m: ModelReport) -> list[str]:
    """Why the model got its verdict, in words, most important first (``verdict.decide``'s reasons); the error
    when it could not be audited. One function for every format."""
    if m.error:
        return [m.error]
    return [describe_reason(r) for r in m.verdict_reasons] or [m.verdict_explanation]


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


def visible(text: str) -> str:
    """Whitespace and control characters as visible glyphs (for plain-text token strips)."""
    if text == "":
        return "∅"
    out = []
    for ch in text:
        if ch in VISIBLE_WS:
            out.append(VISIBLE_WS[ch])
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)
