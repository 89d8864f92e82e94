"""One self-contained HTML page: inline CSS, no scripts, fonts or images from the network.

Everything that came from a template or tokenizer is untrusted and goes through ``html.escape``; token strips
are spans whose hover title shows the id and decoded text, with whitespace made visible. RL plots written by
``tito-audit rl --out DIR`` can be embedded as base64 PNGs together with the summary from ``metrics.json``;
the caller reads that folder (``rl_artifacts.read_rl_dir``) and passes the data, this module reads no file.
"""

from __future__ import annotations

import base64
import re
from html import escape
from typing import Any

from tito_audit.formats.divergence import divergence
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
from tito_audit.formats.visible import visible
from tito_audit.registry import OUTPUT_FORMATS
from tito_audit.report.check_result import CheckResult
from tito_audit.report.findings import Finding
from tito_audit.report.model_report import AuditReport, ModelReport
from tito_audit.report.rl_artifacts import RLArtifacts

FINDINGS_SHOWN = 4  # distinct divergences shown with a token strip per check (all with verbose)

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --panel:#f6f8fa;
  --pass:#1a7f37; --warn:#9a6700; --fail:#cf222e; --err:#8250df; --na:#6e7781; }
* { box-sizing: border-box; }
body { font: 15px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg);
  background: var(--bg); margin: 0 auto; max-width: 1180px; padding: 24px 28px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 20px; margin: 0; } h2.mono { font-size: 18px; }
h3 { font-size: 15px; margin: 22px 0 8px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
code, .mono, .strip { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; }
.sub { color: var(--muted); margin: 0 0 18px; }
.model { border: 1px solid var(--line); border-radius: 10px; padding: 18px 22px; margin: 22px 0; }
.model > header { display: flex; align-items: center; gap: 14px; flex-wrap: wrap; }
.verdict { font-weight: 700; color: #fff; border-radius: 6px; padding: 3px 12px; letter-spacing: .03em; }
.v-unsafe { background: var(--fail); } .v-tito-required { background: var(--warn); }
.v-safe { background: var(--pass); } .v-error { background: var(--err); }
.why { color: var(--muted); margin: 6px 0 0; }
.errline { color: var(--err); font-weight: 600; }
dl.prov { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 14px 0 0;
  font-size: 13px; background: var(--panel); border-radius: 8px; padding: 10px 14px; }
dl.prov dt { color: var(--muted); } dl.prov dd { margin: 0; overflow-wrap: anywhere; }
.pill { display: inline-block; min-width: 48px; text-align: center; border-radius: 999px; padding: 0 9px;
  font-size: 12px; font-weight: 700; border: 1px solid currentColor; }
.s-pass { color: var(--pass); } .s-warn { color: var(--warn); } .s-fail { color: var(--fail); }
.s-error { color: var(--err); } .s-not_applicable { color: var(--na); }
details.check { border-top: 1px solid var(--line); }
details.check > summary { cursor: pointer; padding: 7px 4px; display: grid; gap: 12px; align-items: baseline;
  grid-template-columns: 18px 60px 210px 1fr; list-style: none; }
details.check > summary::-webkit-details-marker { display: none; }
details.check > summary::before { content: "▸"; color: var(--muted); }
details.check[open] > summary::before { content: "▾"; }
details.check > summary:hover { background: var(--panel); }
.cid { font-weight: 600; } .summ { color: var(--fg); }
.body { padding: 4px 8px 14px 34px; }
.expl { color: var(--muted); margin: 0 0 8px; max-width: 900px; }
.fix { background: #ddf4ff; border-left: 4px solid #0969da; padding: 6px 12px; border-radius: 4px;
  margin: 0 0 12px; max-width: 900px; }
.finding { margin: 12px 0 16px; }
.fhead { margin: 0 0 6px; } .fhead .cls { color: var(--muted); }
.fhead .supp { color: var(--na); font-style: italic; }
.diverge { margin: 0 0 6px; font-size: 13px; }
.diverge code { background: var(--panel); border: 1px solid var(--line); border-radius: 4px; padding: 0 4px; }
table.strip { border-collapse: separate; border-spacing: 3px; }
table.strip th { text-align: right; color: var(--muted); font-weight: 400; padding-right: 6px; white-space: nowrap; }
table.strip td { text-align: center; } table.strip td.pos { color: var(--na); font-size: 11px; }
.tok { display: inline-block; padding: 1px 5px; border-radius: 4px; background: #eaeef2; white-space: pre;
  min-width: 14px; text-align: center; }
.tok.after { background: #ffebe9; color: #82071e; }
.tok.first { background: var(--fail); color: #fff; font-weight: 700; }
.row-r .tok.after { background: #ddf4ff; color: #0a3069; }
.row-r .tok.first { background: #0969da; color: #fff; }
.tok .ws { opacity: .7; font-style: normal; }
.tok.first .ws { opacity: .85; }
.more { color: var(--muted); }
ul.rest { margin: 4px 0; padding-left: 20px; font-size: 13px; color: var(--muted); }
table.summary { border-collapse: collapse; margin: 8px 0 4px; }
table.summary td, table.summary th { padding: 3px 14px 3px 0; text-align: left; border-bottom: 1px solid var(--line); }
table.summary th { color: var(--muted); font-weight: 400; }
.plots { display: flex; flex-wrap: wrap; gap: 16px; margin-top: 10px; }
.plots figure { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 6px; }
.plots img { max-width: 500px; width: 100%; display: block; }
.plots figure.wide { flex-basis: 100%; } .plots figure.wide img { max-width: 100%; }
.plots figcaption { color: var(--muted); font-size: 12px; text-align: center; }
.legend { color: var(--muted); font-size: 13px; }
dl.stats { display: grid; grid-template-columns: repeat(3, max-content minmax(90px, 1fr)); gap: 4px 14px;
  font-size: 13px; margin: 12px 0 0; } dl.stats dt { color: var(--muted); } dl.stats dd { margin: 0; }
"""


def esc(value: Any) -> str:
    return escape(str(value), quote=True)


def visible_html(text: str) -> str:
    """Escaped token text with whitespace as dimmed glyphs (␣ ↵ ⇥) and control characters as \\xNN."""
    return visible(text, glyph=lambda g: f'<i class="ws">{g}</i>', other=escape)


def token_span(token_id: int, text: str, cls: str = "") -> str:
    title = f"id {token_id} · {text!r}"
    return f'<span class="tok {cls}" title="{esc(title)}">{visible_html(text)}</span>'


def token_strip(f: Finding) -> str:
    """Two rows aligned by position from ``context_start``; tokens at and after ``index`` highlighted."""
    if f.expected is None or f.actual is None:
        return ""
    start = f.context_start or 0
    n = max(len(f.expected.ids), len(f.actual.ids))
    first = f.index if f.index is not None else start + n

    def cls(pos: int) -> str:
        return "first" if pos == first else ("after" if pos > first else "")

    def row(side: Any) -> str:
        cells = []
        for k in range(n):
            if k < len(side.ids):
                cells.append(f"<td>{token_span(side.ids[k], side.tokens[k], cls(start + k))}</td>")
            else:
                cells.append("<td></td>")
        return "".join(cells)

    positions = "".join(f'<td class="pos">{start + k}</td>' for k in range(n))
    return (
        '<table class="strip">'
        f'<tr><th></th>{positions}</tr><tr class="row-b"><th>buffered</th>{row(f.expected)}</tr>'
        f'<tr class="row-r"><th>re-rendered</th>{row(f.actual)}</tr></table>'
    )


def _divergence_html(f: Finding) -> str:
    d = divergence(f)
    if d is None:
        return ""
    text = d.sentence(quote=lambda s: "\x00" + repr(s) + "\x00")
    parts = text.split("\x00")
    parts[0] = parts[0][:1].upper() + parts[0][1:]
    # Odd parts are quoted token text, even parts are our own words; both are escaped.
    body = "".join(f"<code>{esc(p)}</code>" if i % 2 else esc(p) for i, p in enumerate(parts))
    return f'<p class="diverge">{body}.</p>'


def _prose(text: str) -> str:
    """A check's own explanation (trusted, but escaped anyway) with its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))


def _finding_head(f: Finding) -> str:
    where = f" · token {f.index}" if f.index is not None else ""
    supp = (
        f' <span class="supp">suppressed: {esc(f.suppression_reason or "no reason given")}</span>'
        if f.suppressed
        else ""
    )
    rate = f" · rate {f.rate:.0%}" if f.rate is not None else ""
    return (
        f'<code>{esc(f.scenario)}</code>{esc(where)} · <span class="cls">'
        f"{esc(f.cls.replace('_', ' '))}</span>{esc(rate)} — {esc(f.message)}{supp}"
    )


def _group_key(f: Finding) -> tuple[Any, ...]:
    d = divergence(f)
    if d is None:
        return (f.cls, f.message, f.suppressed)
    return (f.cls, tuple(d.buffered), tuple(d.rerendered), f.suppressed)


def _finding_group(group: list[Finding]) -> str:
    """The first finding with its strip; the others with the same divergence listed under it."""
    f = group[0]
    head = f'<p class="fhead">{_finding_head(f)}</p>'
    same = ""
    if len(group) > 1:
        items = "".join(f"<li>{_finding_head(g)}</li>" for g in group[1:])
        same = (
            f'<details><summary class="more">{len(group) - 1} more with the same divergence</summary>'
            f'<ul class="rest">{items}</ul></details>'
        )
    return f'<div class="finding">{head}{_divergence_html(f)}{token_strip(f)}{same}</div>'


def _check(c: CheckResult, verbose: bool) -> str:
    groups: dict[tuple[Any, ...], list[Finding]] = {}
    for f in c.findings:
        groups.setdefault(_group_key(f), []).append(f)
    ordered = list(groups.values())
    shown = ordered if verbose else ordered[:FINDINGS_SHOWN]
    rest = [f for g in ordered[len(shown) :] for f in g]
    body = [f'<p class="expl">{_prose(c.explanation)}</p>']
    if c.status in ("fail", "warn", "error"):
        body.append(f'<p class="fix"><b>Fix:</b> {_prose(c.fix_hint)}</p>')
    body += [_finding_group(g) for g in shown]
    if rest:
        items = "".join(f"<li>{_finding_head(f)}</li>" for f in rest)
        body.append(
            f'<details><summary class="more">{len(rest)} more finding(s) with other divergences</summary>'
            f'<ul class="rest">{items}</ul></details>'
        )
    is_open = " open" if c.status == "fail" else ""
    return (
        f'<details class="check"{is_open}><summary>'
        f'<span class="pill s-{esc(c.status)}">{esc(STATUS_WORD[c.status])}</span>'
        f'<span class="cid mono" title="{esc(c.title)}">{esc(c.id)}</span><span class="summ">{esc(c.summary)}</span>'
        f'</summary><div class="body">{"".join(body)}</div></details>'
    )


def _provenance(m: ModelReport) -> str:
    p = m.provenance
    if p is None:
        return ""
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
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    return f'<dl class="prov">{items}</dl>'


def _model(m: ModelReport, verbose: bool) -> str:
    header = (
        f'<header><h2 class="mono">{esc(model_label(m))}</h2>'
        f'<span class="verdict v-{esc(m.verdict)}">{esc(m.verdict.upper())}</span></header>'
    )
    if m.error:
        return f'<section class="model">{header}<p class="errline">{esc(m.error)}</p></section>'
    parts = [header, f'<p class="why">{esc(m.verdict_explanation)}</p>']
    approx = approximate_note(m)
    if approx:
        parts.append(f'<p class="why approx">≈ {esc(approx)}</p>')
    if verdict_reasons_text(m):
        parts.append(f'<p class="why">Why: {esc(verdict_reasons_text(m))}</p>')
    if coverage_text(m):
        parts.append(f'<p class="why">Coverage: {esc(coverage_text(m))}</p>')
    parts += [_provenance(m), "<h3>Checks</h3>"]
    parts += [_check(c, verbose) for c in m.checks]
    return f'<section class="model">{"".join(parts)}</section>'


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


def _rl_section(rl: RLArtifacts) -> str:
    summary = rl.metrics.get("summary") or {}
    config = rl.metrics.get("config") or {}
    setup = rl.metrics.get("setup") or {}
    verdict_key = summary.get("verdict") or (
        None if summary.get("corrupted") is None else ("corrupted" if summary.get("corrupted") else "identical")
    )
    badge = _RL_BADGES.get(str(verdict_key))
    verdict = f'<span class="verdict v-{badge[0]}">{esc(badge[1])}</span>' if badge else ""
    stats = "".join(
        f'<dt>{esc(words)}</dt><dd class="mono">{esc(_rl_value(summary[key], spec))}</dd>'
        for key, words, spec in _RL_GRID
        if key in summary
    )
    about = ", ".join(
        f"{k} {v}" for k, v in (("steps", config.get("steps")), ("policy", setup.get("policy"))) if v is not None
    )
    notes = "".join(
        f'<p class="why">{esc(label)}: {esc(str(text))}</p>'
        for label, text in (
            ("holds for", summary.get("holds_for")),
            *(("because", r) for r in summary.get("reasons") or []),
        )
        if text
    )
    todo = "".join(f"<li>{esc(str(line))}</li>" for line in summary.get("what_to_do") or [])
    figures = "".join(
        f'<figure class="{"wide" if name == "token_facts.png" else ""}"><img alt="{esc(name)}" '
        f'src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'
        f"<figcaption>{esc(name)}</figcaption></figure>"
        for name, data in rl.plots.items()
    )
    return (
        '<section class="model"><header><h2>RL: buffered (B) vs re-tokenized (R) gradient</h2>'
        f"{verdict}</header>"
        f'<p class="why">{esc(config.get("model", ""))} {esc("· " + about if about else "")}</p>{notes}'
        f'<dl class="stats">{stats}</dl><div class="plots">{figures}</div>'
        + (f'<h3>What to do</h3><ul class="todo">{todo}</ul>' if todo else "")
        + "</section>"
    )


def to_html(
    report: AuditReport,
    verbose: bool = False,
    rl: RLArtifacts | None = None,
    **_: Any,
) -> str:
    """The report as one page; ``rl`` (``rl_artifacts.read_rl_dir``) adds the RL section with its plots."""
    dates = sorted({str(m.options.get("date", ""))[:10] for m in report.models if m.options.get("date")})
    overview = "".join(
        f'<tr><td class="mono">{esc(model_label(m))}</td>'
        f'<td><span class="verdict v-{esc(m.verdict)}">{esc(m.verdict)}</span></td>'
        f"<td>{esc(m.error or m.verdict_explanation)}</td></tr>"
        for m in report.models
    )
    legend = (
        '<p class="legend">Token strips: hover a token for its id and text; ␣ space, ↵ newline, ⇥ tab, ∅ empty. '
        'The first divergent token is solid; <span class="tok after">later</span> ones are tinted.</p>'
    )
    body = [
        "<h1>tito-audit report</h1>",
        f'<p class="sub">{esc(versions_text(report.libraries))} · templates see the date '
        f"{esc(', '.join(dates) or '-')}</p>",
        f'<p class="verdict v-error">{esc(run_status(report))}</p>' if run_status(report) else "",
        f'<table class="summary">{overview}</table>' if len(report.models) > 1 else "",
        legend,
        *(_model(m, verbose) for m in report.models),
        _rl_section(rl) if rl is not None else "",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>tito-audit: {esc(', '.join(model_label(m) for m in report.models))}</title>"
        f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n"
    )


OUTPUT_FORMATS.register(
    "html",
    "one self-contained HTML page (with --rl-dir: the RL run's plots and metrics)",
    to_html,
    doc=__doc__,
    order=40,
)
