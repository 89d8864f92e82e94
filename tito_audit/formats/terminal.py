"""What a person sees in a terminal: verdict line, check table, token strip of each failing check."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tito_audit.formats.labels import (
    approximate_note,
    coverage_text,
    renderer_lines,
    run_status,
    verdict_reasons_text,
    versions_text,
)
from tito_audit.registry import OUTPUT_FORMATS
from tito_audit.report.quote import clipped

if TYPE_CHECKING:
    from tito_audit.report.findings import Finding
    from tito_audit.report.model_report import AuditReport, ModelReport

VERDICT_STYLE = {
    "unsafe": "bold red",
    "tito-required": "bold yellow",
    "safe": "bold green",
    "error": "bold magenta",
}
STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "red", "not_applicable": "dim", "error": "magenta"}
STATUS_LABEL = {"pass": "pass", "warn": "warn", "fail": "FAIL", "not_applicable": "n/a", "error": "error"}


FIRST_DIVERGENT = "→"  # marks the first divergent row of a token strip, with or without colour
SUMMARY_LIMIT = 240  # characters of a check summary in the table (the checks bound quoted template text)


def provenance_fields(m: ModelReport) -> list[str]:
    """The provenance line's fields, each one unit that a wrap must not split."""
    p = m.provenance
    if p is None:
        return []
    where = f"{p.source} {p.repo_id}@{(p.revision or '-')[:12]}" if p.repo_id else p.source
    named = f" (named {p.template_name})" if p.template_name else ""
    return [
        where,
        f"template {p.template_file}{named}",
        *([f"sha256:{p.template_sha256[:12]}"] if p.template_sha256 else []),  # None: a renderer, named instead
        f"{p.tokenizer_class} vocab {p.vocab_size}",
        f"date {str(m.options.get('date', ''))[:10]}",
    ]


def packed(fields: list[str], width: int, sep: str = "  ") -> list[str]:
    """Fields joined on as few lines of ``width`` as fit, breaking only between fields."""
    lines: list[str] = []
    for f in fields:
        if lines and len(lines[-1]) + len(sep) + len(f) <= width:
            lines[-1] += sep + f
        else:
            lines.append(f)
    return lines


def token_strip(finding: Finding) -> Table:
    """Buffered vs re-rendered tokens, aligned by position, divergent ones highlighted."""
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("", width=1, no_wrap=True)  # FIRST_DIVERGENT: readable without colour (--output, a pipe)
    table.add_column("pos", justify="right", style="dim")
    table.add_column("buffered (id: text)")
    table.add_column("re-rendered (id: text)")
    exp = finding.expected.ids if finding.expected else []
    act = finding.actual.ids if finding.actual else []
    exp_t = finding.expected.tokens if finding.expected else []
    act_t = finding.actual.tokens if finding.actual else []
    start = finding.context_start or 0
    for k in range(max(len(exp), len(act))):
        pos = start + k
        diverged = finding.index is not None and pos >= finding.index
        style = "bold red" if diverged else ""
        left = f"{exp[k]}: {exp_t[k]!r}" if k < len(exp) else "—"
        right = f"{act[k]}: {act_t[k]!r}" if k < len(act) else "—"
        mark = FIRST_DIVERGENT if finding.index is not None and pos == finding.index else ""
        table.add_row(Text(mark, style=style), str(pos), Text(left, style=style), Text(right, style=style))
    return table


def model_section(console: Console, m: ModelReport, verbose: bool = False, quiet: bool = False) -> None:
    verdict = Text(f"{m.verdict.upper()}", style=VERDICT_STYLE[m.verdict])
    reasons = verdict_reasons_text(m)
    head = Text.assemble(
        Text(f"{m.model}  "),
        verdict,
        Text(f"  {m.verdict_explanation}", style="dim"),
        Text(f"  ({reasons})" if reasons else "", style=VERDICT_STYLE[m.verdict]),
    )
    console.print(head, soft_wrap=True)  # one line per model, also in CI logs and pipes
    approx = approximate_note(m)
    if approx:
        console.print(Text(f"  ≈ {approx}", style="yellow"), soft_wrap=True)
    if m.error:
        console.print(Text(f"  error: {m.error}", style="magenta"))
        return
    if quiet:
        return
    if m.provenance:
        for line in packed(provenance_fields(m), console.width - 2):
            console.print(Text(f"  {line}", style="dim"), soft_wrap=True)
    for line in renderer_lines(m):
        console.print(Text(f"  {line}", style="dim"), soft_wrap=True)
    if coverage_text(m):
        console.print(Text(f"  {coverage_text(m)}", style="yellow" if m.scenarios.get("low_coverage") else "dim"))
    table = Table(show_header=True, header_style="bold")
    table.add_column("check")
    table.add_column("status")
    table.add_column("summary", overflow="fold")
    for c in m.checks:
        summary = clipped(c.summary, SUMMARY_LIMIT)
        table.add_row(c.id, Text(STATUS_LABEL[c.status], style=STATUS_STYLE[c.status]), Text(summary))
    console.print(table)
    for c in m.checks:
        if c.status == "error" or (c.status == "fail" and not any(f.expected is not None for f in c.active_findings)):
            # every error-level failure gets its reason and fix, with or without a token strip
            reason = c.summary if c.status == "error" or not c.active_findings else c.active_findings[0].message
            console.print(Text(f"  {c.id} · {c.status}: {reason}", style="bold"))
            console.print(Text(f"  fix: {c.fix_hint}", style="cyan"))
            continue
        shown = c.findings if verbose else [f for f in c.findings if f.expected is not None][:1]
        if c.status not in ("fail", "warn") or not shown:
            continue
        if not verbose and c.status != "fail":
            continue
        for f in shown:
            console.print(Text(f"  {c.id} · {f.scenario} · {f.cls.replace('_', ' ')}: {f.message}", style="bold"))
            if f.expected is not None:
                console.print(token_strip(f))
        console.print(Text(f"  fix: {c.fix_hint}", style="cyan"))


def to_terminal(
    report: AuditReport, console: Console | None = None, verbose: bool = False, quiet: bool = False, **_: Any
) -> str:
    buffer = io.StringIO()
    target = console or Console(file=buffer, width=140, force_terminal=False, color_system=None)
    if not quiet:
        target.print(Text(versions_text(report.libraries), style="dim"), soft_wrap=True)
    if run_status(report):
        target.print(Text(run_status(report), style="bold magenta"), soft_wrap=True)
    for m in report.models:
        model_section(target, m, verbose=verbose, quiet=quiet)
        if not quiet:
            target.print()
    if quiet:  # one line per model, then what produced them: a verdict can change with a library release
        target.print(Text(versions_text(report.libraries), style="dim"), soft_wrap=True)
    return buffer.getvalue()


OUTPUT_FORMATS.register(
    "terminal",
    "what a person reads in a terminal: verdict line, check table, token strips (the default)",
    to_terminal,
    doc=__doc__,
    order=10,
)
