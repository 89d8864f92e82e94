"""A scan's summary for people: the Markdown page (``--markdown``) and the terminal table."""

from __future__ import annotations

from typing import Any

from tito_audit.formats.labels import versions_text
from tito_audit.formats.markdown import md_code, md_text
from tito_audit.report import scan_classes as classify
from tito_audit.report.quote import clipped
from tito_audit.report.scan_report import ScanSummary, libraries


def scan_markdown(summary: ScanSummary, show: int = 20) -> str:
    """The scan's Markdown page: counts per class (approximate verdicts apart), flags, coverage, templates by class
    and the first ``show`` templates without a verdict with their reasons."""
    lines = [
        f"# Template scan: {md_code(summary.root)}",
        "",
        f"{len(summary.results)} templates, tokenizer {md_code(summary.tokenizer)}, {summary.seconds:.1f}s "
        f"with {summary.workers} worker(s); {versions_text(libraries())}.",
        "",
        *([f"**{summary.status}**", ""] if summary.status else []),
        "| class | templates | meaning |",
        "|---|---:|---|",
    ]
    lines += [
        f"| {c} | {summary.split_count(c, n)} | {md_text(classify.DESCRIPTIONS.get(c, ''))} |"
        for c, n in summary.counts.items()
    ]
    if summary.approximate_counts:
        lines += [
            "",
            f"Approximate: {sum(summary.approximate_counts.values())} verdicts on a tokenizer synthesized from the "
            "template's own control tokens (no candidate tokenizer had them; see docs/checks.md).",
        ]
    if summary.flag_counts:
        lines += ["", "| flag | templates |", "|---|---:|"]
        lines += [f"| {md_text(k)} | {n} |" for k, n in summary.flag_counts.items()]
    lines += ["", "| coverage | templates |", "|---|---:|"]
    lines += [f"| {k.replace('_', ' ')} | {n} |" for k, n in summary.coverage.items()]
    lines += ["", "## Templates by class"]
    for c, n in summary.counts.items():
        lines += ["", f"**{c}** ({n}): " + ", ".join(md_code(name) for name in summary.names(c))]
    errors = [r for r in summary.results if r.cls in classify.ERROR_CLASSES][:show]
    if errors:
        lines += ["", "| template | class | reason |", "|---|---|---|"]
        lines += [f"| {md_code(r.name, in_table=True)} | {r.cls} | {md_text(clipped(r.reason, 120))} |" for r in errors]
    return "\n".join(lines) + "\n"


def scan_table(summary: ScanSummary, names_shown: int = 4) -> Any:
    """The terminal's rich table: a row per class with the first ``names_shown`` templates in it."""
    from rich.markup import escape
    from rich.table import Table

    status = f" · {summary.status}" if summary.status else ""
    table = Table(
        title=f"{len(summary.results)} templates · {summary.seconds:.1f}s · {summary.workers} worker(s){status}",
        caption=versions_text(libraries()),
    )
    table.add_column("class")
    table.add_column("templates", justify="right")
    table.add_column("meaning")
    table.add_column("which", overflow="fold")
    for c, n in summary.counts.items():
        names = summary.names(c)
        which = ", ".join(names[:names_shown]) + (f" and {n - names_shown} more" if n > names_shown else "")
        table.add_row(c, summary.split_count(c, n), classify.DESCRIPTIONS.get(c, ""), escape(which))
    for k, n in summary.flag_counts.items():
        table.add_row(f"[dim]flag: {k}[/dim]", str(n), "", "")
    for k, n in summary.coverage.items():
        table.add_row(f"[dim]coverage: {k.replace('_', ' ')}[/dim]", str(n), "", "")
    return table
