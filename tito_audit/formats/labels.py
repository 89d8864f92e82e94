"""How every human-readable format names a model and its verdict: status symbols, the model label, provenance
cuts, the verdict's reasons and the coverage line, kept in one place so that every format says it the same way."""

from __future__ import annotations

from pathlib import PurePath

from tito_audit.audit import ModelReport
from tito_audit.verdict import MIN_COVERAGE, describe_reason

STATUS_ICON = {"pass": "✅", "warn": "⚠️", "fail": "❌", "not_applicable": "n/a", "error": "💥"}
STATUS_WORD = {"pass": "pass", "warn": "warn", "fail": "fail", "not_applicable": "n/a", "error": "error"}
VERDICT_ICON = {"safe": "✅", "tito-required": "⚠️", "unsafe": "❌", "error": "💥"}


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


def renderer_lines(m: ModelReport) -> list[str]:
    """One line per renderer that is not the model's template alone (``--renderer``/``--train-renderer``), and the
    line saying what it could not do offline (never left out)."""
    lines = []
    for role, info in (m.renderers or {}).items():
        if info is None:
            continue
        lines.append(f"{role} renderer {info['name']} ({info['library']}, renders {info['native']})")
        if info.get("offline"):
            lines.append(f"{role} renderer offline: {info['offline']}")
    return lines
