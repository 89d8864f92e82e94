"""Markdown: the per-model report (``--format markdown``); the cross-model table is ``formats.compatibility``.

Tables go through pandas (``DataFrame.to_markdown``, tabulate's pipe format). Template-derived text is put in
code spans or backslash-escaped so that it can neither break a table nor inject HTML into a rendered page.
Output is deterministic: no timings, no absolute paths, no dates other than the pinned template date.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tito_audit.formats.divergence import finding_sentence, first_active
from tito_audit.formats.labels import (
    STATUS_ICON,
    STATUS_WORD,
    VERDICT_ICON,
    approximate_note,
    coverage_text,
    model_label,
    renderer_lines,
    run_status,
    template_origin,
    verdict_reasons_text,
    versions_text,
)
from tito_audit.formats.visible import visible
from tito_audit.registry import OUTPUT_FORMATS

if TYPE_CHECKING:  # pandas is imported by the functions that build tables (a third of a second of a cold start)
    import pandas as pd

    from tito_audit.report.check_result import CheckResult
    from tito_audit.report.findings import Finding
    from tito_audit.report.model_report import AuditReport, ModelReport

_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|])")
NOT_RUN = "—"
FINDINGS_SHOWN = 5


def md_text(text: str) -> str:
    """Plain text with Markdown/HTML metacharacters backslash-escaped, on one line."""
    return _MD_SPECIAL.sub(r"\\\1", re.sub(r"\s+", " ", str(text)))


def md_code(text: str, in_table: bool = False) -> str:
    """A code span that survives any content: the fence is longer than any backtick run inside."""
    text = " ".join(str(text).splitlines()) if "\n" in text else text
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith(("`", " ")) or text.endswith(("`", " ")) or not text else ""
    span = f"{fence}{pad}{text}{pad}{fence}"
    return span.replace("|", r"\|") if in_table else span


def _quote(text: str) -> str:
    return md_code(repr(text))


def table_markdown(df: pd.DataFrame) -> str:
    return str(df.to_markdown(index=False, disable_numparse=True))


def _date(m: ModelReport) -> str:
    return str(m.options.get("date", ""))[:10]


# --- the per-model report ---------------------------------------------------------------------------------


def _synthesized_md(p: Any) -> str:
    return f", synthesized on base {md_code(p.tokenizer_base, True)}" if p.tokenizer == "synthesized" else ""


def _provenance_rows(m: ModelReport) -> list[tuple[str, str]]:
    p = m.provenance
    if p is None:
        return []
    repo = f"{md_code(p.repo_id, True)} @ {md_code(p.revision or '-', True)}" if p.repo_id else "-"
    template = md_code(template_origin(m), True) + (
        f" (named {md_code(p.template_name, True)})" if p.template_name else ""
    )
    rows = [
        ("source", md_text(p.source)),
        ("repository", repo),
        ("template", template),
        ("template sha256", md_code(p.template_sha256, True) if p.template_sha256 else "- (no template renders)"),
        ("tokenizer", f"{md_text(p.tokenizer_class)}, vocab {p.vocab_size}" + _synthesized_md(p)),
        ("bos / eos", f"{md_code(repr(p.bos_token), True)} / {md_code(repr(p.eos_token), True)}"),
        ("license", md_text(p.license or "-")),
        ("date templates see", _date(m)),
        ("thinking modes", md_text(", ".join(str(t) for t in m.scenarios.get("thinking_modes", [])) or "-")),
    ]
    if m.options.get("template_kwargs"):
        rows.append(("template kwargs", md_code(repr(m.options["template_kwargs"]), True)))
    for line in renderer_lines(m):
        label, _, value = line.partition(" renderer ")
        rows.append((f"{label} renderer", md_text(value)))
    return rows


def token_strip(f: Finding) -> str:
    """Buffered vs re-rendered ids by position from ``context_start``; divergent rows in bold."""
    import pandas as pd

    exp = f.expected or None
    act = f.actual or None
    if exp is None or act is None:
        return ""
    start = f.context_start or 0
    rows = []
    for k in range(max(len(exp.ids), len(act.ids))):
        pos = start + k
        mark = "**≠**" if f.index is not None and pos >= f.index else ""
        left = f"{exp.ids[k]} {md_code(visible(exp.tokens[k]), True)}" if k < len(exp.ids) else NOT_RUN
        right = f"{act.ids[k]} {md_code(visible(act.tokens[k]), True)}" if k < len(act.ids) else NOT_RUN
        rows.append({"pos": str(pos), "": mark, "buffered": left, "re-rendered": right})
    return table_markdown(pd.DataFrame(rows))


def _check_section(c: CheckResult, verbose: bool) -> list[str]:
    icon = STATUS_ICON[c.status]
    out = [f"#### {icon} {md_code(c.id)} — {md_text(c.title)}", ""]
    # Explanations and fix hints are the checks' own Markdown (trusted); summaries quote template text.
    out += [f"{md_text(c.summary)}. {c.explanation}", "", f"**Fix:** {c.fix_hint}", ""]
    shown = c.findings if verbose else c.findings[:FINDINGS_SHOWN]
    for n, f in enumerate(shown, 1):
        supp = f" *(suppressed: {md_text(f.suppression_reason or 'no reason given')})*" if f.suppressed else ""
        out.append(f"{n}. {md_text(f.cls.replace('_', ' '))} · {_finding_md(f)}{supp}")
    if len(c.findings) > len(shown):
        out.append(f"\n… and {len(c.findings) - len(shown)} more (`--verbose` lists them all).")
    strip_of = first_active(c)
    if strip_of is not None and strip_of.expected is not None:
        out += ["", f"First divergence ({md_text(strip_of.scenario)}):", "", token_strip(strip_of)]
    return [*out, ""]


def _finding_md(f: Finding) -> str:
    """``finding_sentence`` with Markdown escaping: plain parts escaped, token text in code spans."""
    parts = re.split(r"(\x00[^\x00]*\x00)", finding_sentence(f, quote=lambda s: "\x00" + repr(s) + "\x00"))
    return "".join(md_code(p.strip("\x00")) if p.startswith("\x00") else md_text(p) for p in parts)


def model_markdown(m: ModelReport, verbose: bool = False, quiet: bool = False) -> str:
    import pandas as pd

    out = [f"## {md_code(model_label(m))} — {VERDICT_ICON[m.verdict]} {m.verdict.upper()}", ""]
    out += [md_text(m.error) if m.error else md_text(m.verdict_explanation), ""]
    approx = approximate_note(m)
    if approx:
        out += [f"> ≈ {md_text(approx)}", ""]
    if verdict_reasons_text(m):
        out += [f"**Why:** {md_text(verdict_reasons_text(m))}.", ""]
    if coverage_text(m):
        out += [f"**Coverage:** {md_text(coverage_text(m))}.", ""]
    if m.error or quiet:
        return "\n".join(out)
    out += [table_markdown(pd.DataFrame(_provenance_rows(m), columns=["provenance", ""])), ""]
    checks = pd.DataFrame(
        [
            {
                "check": md_code(c.id, True),
                "status": f"{STATUS_ICON[c.status]} {STATUS_WORD[c.status]}" if c.status != "not_applicable" else "n/a",
                "severity": c.severity,
                "findings": str(len(c.active_findings)),
                "summary": md_text(c.summary),
            }
            for c in m.checks
        ]
    )
    out += ["### Checks", "", table_markdown(checks), ""]
    flagged = [c for c in m.checks if c.findings and (verbose or c.status in ("fail", "warn"))]
    if flagged:
        out += ["### Findings", ""]
        for c in flagged:
            out += _check_section(c, verbose)
    return "\n".join(out)


def to_markdown(report: AuditReport, verbose: bool = False, quiet: bool = False, **_: Any) -> str:
    dates = sorted({_date(m) for m in report.models if _date(m)})
    made = f"{versions_text(report.libraries)}; templates see the date {', '.join(dates) or '-'}."
    head = ["# tito-audit report", "", made]
    if run_status(report):
        head += ["", f"**{run_status(report)}.**"]
    body = [model_markdown(m, verbose=verbose, quiet=quiet) for m in report.models]
    return "\n".join([*head, "", *body]).rstrip() + "\n"


OUTPUT_FORMATS.register(
    "markdown",
    "a Markdown page: verdicts, provenance, check table, token strips",
    to_markdown,
    doc=__doc__,
    order=30,
)
