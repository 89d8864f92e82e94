"""How every human-readable format names a model and its verdict: status symbols, the model label, provenance
cuts, the verdict's reasons and the coverage line, kept in one place so that every format says it the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from tito_audit.report.verdict import MIN_COVERAGE, describe_reason

if TYPE_CHECKING:
    from tito_audit.report.model_report import AuditReport, ModelReport

STATUS_ICON = {"pass": "✅", "warn": "⚠️", "fail": "❌", "not_applicable": "n/a", "error": "💥"}
STATUS_WORD = {"pass": "pass", "warn": "warn", "fail": "fail", "not_applicable": "n/a", "error": "error"}
VERDICT_ICON = {"safe": "✅", "tito-required": "⚠️", "unsafe": "❌", "error": "💥"}


LIBRARY_ORDER = ("tito-audit", "transformers", "tokenizers", "jinja2", "hypothesis")


def versions_text(libraries: Mapping[str, Any]) -> str:
    """``tito-audit 0.5.0 · transformers 5.24.0 · tokenizers 0.23.3 · jinja2 3.1.6 · hypothesis 6.170.17``, and the
    compat fallbacks that ran, if any: a verdict can change with a transformers release (and a search's draws with a
    hypothesis one), so every format says what produced it."""
    text = " · ".join(f"{name} {libraries[name]}" for name in LIBRARY_ORDER if name in libraries)
    fallbacks = libraries.get("compat_fallbacks") or []
    if fallbacks:
        text += f" · compat fallbacks: {', '.join(fallbacks)}"
    return text


def models_libraries(models: Sequence[ModelReport]) -> dict[str, Any]:
    """The libraries named in the models' provenance (the first that has them), else this process's."""
    for m in models:
        if m.provenance is not None and m.provenance.libraries:
            return dict(m.provenance.libraries)
    from tito_audit.compat import library_versions

    return dict(library_versions())


def run_status(report: AuditReport) -> str:
    """ "" for a complete run; for one stopped early, what it holds (``interrupted after 2 of 7 models``)."""
    if report.complete:
        return ""
    if report.interrupted is not None:
        return f"INCOMPLETE: {report.interrupted}"
    return f"INCOMPLETE: interrupted after {len(report.models)} of {report.requested} models"


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
    search = search_text(s.get("search"))
    return f"{text}; {search}" if search else text


def search_text(search: dict[str, Any] | None) -> str:
    """What the counterexample search did (``scenarios.search``), in words ("" for a report without one)."""
    if not search:
        return ""
    if "skipped" in search:
        why = search["skipped"]
        return "search off (--search 0)" if why.startswith("off") else f"no search: {why}"
    found = search.get("counterexamples") or []
    text = f"searched {search.get('drawn', 0)} conversations (seed {search.get('seed', 0)})"
    if search.get("stopped"):
        text += f", stopped at {search['stopped']}"
    if not found:
        return text + ": no counterexample"
    return text + f": {len(found)} counterexample(s) ({', '.join(c['scenario'] for c in found)})"


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
    """One line per renderer that is not the model's template alone (``--renderer``/``--train-renderer``), the line
    saying what it could not do offline and its notes (options it was not given, switches not probed): never left
    out."""
    lines = []
    for role, info in (m.renderers or {}).items():
        if info is None:
            continue
        native = info["native"] or "nothing (it never rendered)"
        lines.append(f"{role} renderer {info['name']} ({info['library']}, renders {native})")
        if info.get("offline"):
            lines.append(f"{role} renderer offline: {info['offline']}")
        lines += [f"{role} renderer note: {note}" for note in info.get("notes", [])]
    return lines
