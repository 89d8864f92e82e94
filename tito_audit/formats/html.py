"""One self-contained HTML page: inline CSS, no scripts, fonts or images from the network.

The markup is the template ``formats/templates/audit.html`` (jinja2, autoescape: ``formats/pages.py``); this module
gives it the report's values as text. Everything that came from a template or tokenizer is untrusted and is escaped
where the template writes it; token strips are spans whose hover title shows the id and decoded text, with
whitespace made visible. RL plots written by ``tito-audit rl --out DIR`` can be embedded as base64 PNGs together
with the summary from ``metrics.json``; the caller reads that folder (``rl_artifacts.read_rl_dir``) and passes the
data, this module reads no file.
"""

from __future__ import annotations

import base64
import re
from typing import TYPE_CHECKING, Any

from tito_audit.formats.labels import (
    STATUS_WORD,
    approximate_note,
    coverage_text,
    model_label,
    run_status,
    template_origin,
    verdict_reasons_text,
    versions_text,
)
from tito_audit.registry import OUTPUT_FORMATS

if TYPE_CHECKING:
    from tito_audit.report.check_result import CheckResult
    from tito_audit.report.findings import Finding, TokenSide
    from tito_audit.report.model_report import AuditReport, ModelReport
    from tito_audit.report.rl_artifacts import RLArtifacts

FINDINGS_SHOWN = 4  # distinct divergences shown with a token strip per check (all with verbose)


def _with_code(text: str) -> list[str]:
    """A check's own text (trusted, escaped anyway) split at its `code` spans: our words, then code, alternately."""
    return re.split(r"`([^`]+)`", text)


def _strip(f: Finding) -> dict[str, Any] | None:
    """Two rows aligned by position from ``context_start``; tokens at and after ``index`` highlighted."""
    from tito_audit.formats.visible import visible_pieces

    if f.expected is None or f.actual is None:
        return None
    start = f.context_start or 0
    n = max(len(f.expected.ids), len(f.actual.ids))
    first = f.index if f.index is not None else start + n

    def cls(pos: int) -> str:
        return "first" if pos == first else ("after" if pos > first else "")

    def row(side: TokenSide) -> list[dict[str, Any] | None]:
        return [
            {
                "cls": cls(start + k),
                "title": f"id {side.ids[k]} · {side.tokens[k]!r}",
                "pieces": visible_pieces(side.tokens[k]),
            }
            if k < len(side.ids)
            else None
            for k in range(n)
        ]

    return {"positions": [start + k for k in range(n)], "buffered": row(f.expected), "rerendered": row(f.actual)}


def _divergence(f: Finding) -> list[str] | None:
    """The first divergent text in words, the quoted token text apart (the template shows it as code)."""
    from tito_audit.formats.divergence import divergence

    d = divergence(f)
    if d is None:
        return None
    parts = d.sentence(quote=lambda s: "\x00" + repr(s) + "\x00").split("\x00")
    parts[0] = parts[0][:1].upper() + parts[0][1:]
    return parts


def _head(f: Finding) -> dict[str, Any]:
    return {
        "scenario": f.scenario,
        "where": f" · token {f.index}" if f.index is not None else "",
        "cls": f.cls.replace("_", " "),
        "rate": f" · rate {f.rate:.0%}" if f.rate is not None else "",
        "message": f.message,
        "suppressed": (f.suppression_reason or "no reason given") if f.suppressed else "",
    }


def _group_key(f: Finding) -> tuple[Any, ...]:
    from tito_audit.formats.divergence import divergence

    d = divergence(f)
    if d is None:
        return (f.cls, f.message, f.suppressed)
    return (f.cls, tuple(d.buffered), tuple(d.rerendered), f.suppressed)


def _check(c: CheckResult, verbose: bool) -> dict[str, Any]:
    """One check: its findings grouped by divergence, the first of each group with its strip, the others under it."""
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    for f in c.findings:
        groups.setdefault(_group_key(f), []).append(f)
    ordered = list(groups.values())
    shown = ordered if verbose else ordered[:FINDINGS_SHOWN]
    return {
        "id": c.id,
        "title": c.title,
        "status": c.status,
        "status_word": STATUS_WORD[c.status],
        "summary": c.summary,
        "open": c.status == "fail",
        "explanation": _with_code(c.explanation),
        "fix": _with_code(c.fix_hint) if c.status in ("fail", "warn", "error") else None,
        "groups": [
            {
                "first": _head(g[0]),
                "divergence": _divergence(g[0]),
                "strip": _strip(g[0]),
                "same": [_head(f) for f in g[1:]],
            }
            for g in shown
        ],
        "rest": [_head(f) for g in ordered[len(shown) :] for f in g],
    }


def _provenance(m: ModelReport) -> list[tuple[str, str]]:
    p = m.provenance
    if p is None:
        return []
    rows = [
        ("source", p.source),
        ("repository", f"{p.repo_id} @ {p.revision or '-'}" if p.repo_id else "-"),
        ("template", template_origin(m) + (f" (named {p.template_name})" if p.template_name else "")),
        ("template sha256", p.template_sha256 or "- (no template renders)"),
        (
            "tokenizer",
            f"{p.tokenizer_class}, vocab {p.vocab_size:,}"
            + (f", synthesized on base {p.tokenizer_base}" if p.tokenizer == "synthesized" else ""),
        ),
        ("bos / eos", f"{p.bos_token!r} / {p.eos_token!r}"),
        ("license", p.license or "-"),
        ("date templates see", str(m.options.get("date", ""))[:10]),
        ("thinking modes", ", ".join(str(t) for t in m.scenarios.get("thinking_modes", [])) or "-"),
        ("episodes played", str(m.scenarios.get("played", "-"))),
    ]
    if m.options.get("template_kwargs"):
        rows.append(("template kwargs", repr(m.options["template_kwargs"])))
    return [(k, str(v)) for k, v in rows]


def _model(m: ModelReport, verbose: bool) -> dict[str, Any]:
    view: dict[str, Any] = {
        "label": model_label(m),
        "verdict": m.verdict,
        "error": m.error,
        "explanation": m.verdict_explanation,
    }
    if not m.error:
        view |= {
            "approximate": approximate_note(m),
            "reasons": verdict_reasons_text(m),
            "coverage": coverage_text(m),
            "provenance": _provenance(m),
            "checks": [_check(c, verbose) for c in m.checks],
        }
    return view


# --- RL plots ---------------------------------------------------------------------------------------------


def _number(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return "n/a" if x is None else ("yes" if x else "no")
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


# The RL summary grid: (metrics.json summary key, words, format). Keys a run did not write are left out.
_RL_GRID = (
    ("sequences_affected", "sequences R changes (token facts)", "{}"),
    ("sequences", "sequences in the token facts", "{}"),
    ("mismatched_trained", "trained tokens without partner", "{}"),
    ("flip_sampled_dropped", "sampled tokens R drops from the loss", "{}"),
    ("flip_template_trained", "template tokens R trains", "{}"),
    ("context_changed_trained", "trained tokens whose context R changes", "{}"),
    ("parse_rate_every_scenario", "R parse rate, every scenario", "{:.0%}"),
    ("parse_rate_batches", "R parse rate, batches played", "{:.0%}"),
    ("rel_error_max", "largest relative gradient error", "{:.3g}"),
    ("cosine_min", "lowest gradient cosine", "{:.4f}"),
    ("identical_tolerance", "tolerance (10 x noise floor)", "{:.2g}"),
    ("abs_dlogp_max", "largest |logp_R - logp_B|", "{:.3g}"),
    ("step_seconds_mean", "seconds per step", "{:.2f}"),
    ("peak_gpu_memory_gb", "peak GPU memory (GB)", "{:.2f}"),
)
_RL_BADGES = {
    "corrupted": ("unsafe", "R GRADIENT CORRUPTED"),
    "identical": ("safe", "R GRADIENT = B"),
    "not_applicable": ("error", "NOT APPLICABLE TO TOOL TURNS"),
    "undetermined": ("error", "UNDETERMINED"),
    "control": ("error", "CONTROL (R := B), NOT THE TEMPLATE"),
}


def _rl_value(value: Any, spec: str) -> str:
    if value is None:
        return "n/a"
    try:
        return spec.format(value)
    except (TypeError, ValueError):
        return _number(value)


def _rl_section(rl: RLArtifacts) -> dict[str, Any]:
    summary = rl.metrics.get("summary") or {}
    config = rl.metrics.get("config") or {}
    setup = rl.metrics.get("setup") or {}
    verdict_key = summary.get("verdict") or (
        None if summary.get("corrupted") is None else ("corrupted" if summary.get("corrupted") else "identical")
    )
    about = ", ".join(
        f"{k} {v}" for k, v in (("steps", config.get("steps")), ("policy", setup.get("policy"))) if v is not None
    )
    notes = (("holds for", summary.get("holds_for")), *(("because", r) for r in summary.get("reasons") or []))
    return {
        "badge": _RL_BADGES.get(str(verdict_key)),
        "model": config.get("model", ""),
        "about": "· " + about if about else "",
        "notes": [(label, str(text)) for label, text in notes if text],
        "stats": [(words, _rl_value(summary[key], spec)) for key, words, spec in _RL_GRID if key in summary],
        "figures": [
            (name, "wide" if name == "token_facts.png" else "", base64.b64encode(data).decode("ascii"))
            for name, data in rl.plots.items()
        ],
        "todo": [str(line) for line in summary.get("what_to_do") or []],
    }


def to_html(
    report: AuditReport,
    verbose: bool = False,
    rl: RLArtifacts | None = None,
    **_: Any,
) -> str:
    """The report as one page; ``rl`` (``rl_artifacts.read_rl_dir``) adds the RL section with its plots."""
    from tito_audit.formats.pages import render_page

    dates = sorted({str(m.options.get("date", ""))[:10] for m in report.models if m.options.get("date")})
    return render_page(
        "audit.html",
        labels=[model_label(m) for m in report.models],
        versions=versions_text(report.libraries),
        dates=", ".join(dates) or "-",
        status=run_status(report),
        models=[_model(m, verbose) for m in report.models],
        rl=_rl_section(rl) if rl is not None else None,
    )


OUTPUT_FORMATS.register(
    "html",
    "one self-contained HTML page (with --rl-dir: the RL run's plots and metrics)",
    to_html,
    doc=__doc__,
    order=40,
)
