"""Markdown: the per-model report (``--format markdown``) and the cross-model compatibility table.

Tables go through pandas (``DataFrame.to_markdown``, tabulate's pipe format). Template-derived text is put in
code spans or backslash-escaped so that it can neither break a table nor inject HTML into a rendered page.
Output is deterministic: no timings, no absolute paths, no dates other than the pinned template date.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pandas as pd

from tito_audit import __version__
from tito_audit.audit import AuditReport, ModelReport
from tito_audit.checks import ordered_checks
from tito_audit.checks.base import CheckResult, Finding
from tito_audit.formats.common import (
    STATUS_ICON,
    STATUS_WORD,
    VERDICT_ICON,
    coverage_text,
    divergence,
    finding_sentence,
    first_active,
    model_label,
    short_revision,
    template_origin,
    verdict_reasons_text,
    visible,
)
from tito_audit.verdict import VERDICTS

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


def _table(df: pd.DataFrame) -> str:
    return str(df.to_markdown(index=False, disable_numparse=True))


def _date(m: ModelReport) -> str:
    return str(m.options.get("date", ""))[:10]


# --- the per-model report ---------------------------------------------------------------------------------


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
        ("template sha256", md_code(p.template_sha256, True)),
        ("tokenizer", f"{md_text(p.tokenizer_class)}, vocab {p.vocab_size}"),
        ("bos / eos", f"{md_code(repr(p.bos_token), True)} / {md_code(repr(p.eos_token), True)}"),
        ("license", md_text(p.license or "-")),
        ("date templates see", _date(m)),
        ("thinking modes", md_text(", ".join(str(t) for t in m.scenarios.get("thinking_modes", [])) or "-")),
    ]
    if m.options.get("template_kwargs"):
        rows.append(("template kwargs", md_code(repr(m.options["template_kwargs"]), True)))
    return rows


def token_strip(f: Finding) -> str:
    """Buffered vs re-rendered ids by position from ``context_start``; divergent rows in bold."""
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
    return _table(pd.DataFrame(rows))


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
    out = [f"## {md_code(model_label(m))} — {VERDICT_ICON[m.verdict]} {m.verdict.upper()}", ""]
    out += [md_text(m.error) if m.error else md_text(m.verdict_explanation), ""]
    if verdict_reasons_text(m):
        out += [f"**Why:** {md_text(verdict_reasons_text(m))}.", ""]
    if coverage_text(m):
        out += [f"**Coverage:** {md_text(coverage_text(m))}.", ""]
    if m.error or quiet:
        return "\n".join(out)
    out += [_table(pd.DataFrame(_provenance_rows(m), columns=["provenance", ""])), ""]
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
    out += ["### Checks", "", _table(checks), ""]
    flagged = [c for c in m.checks if c.findings and (verbose or c.status in ("fail", "warn"))]
    if flagged:
        out += ["### Findings", ""]
        for c in flagged:
            out += _check_section(c, verbose)
    return "\n".join(out)


def to_markdown(report: AuditReport, verbose: bool = False, quiet: bool = False, **_: Any) -> str:
    dates = sorted({_date(m) for m in report.models if _date(m)})
    head = ["# tito-audit report", "", f"tito-audit {__version__}; templates see the date {', '.join(dates) or '-'}."]
    body = [model_markdown(m, verbose=verbose, quiet=quiet) for m in report.models]
    return "\n".join([*head, "", *body]).rstrip() + "\n"


# --- the compatibility table ------------------------------------------------------------------------------

LEGEND = (
    "✅ pass · ⚠️ warn (a warning-level check found something) · ❌ fail (an error-level check failed; "
    f"the numbered note says where) · n/a not applicable · 💥 error (could not run) · {NOT_RUN} not run"
)


def _footnote(m: ModelReport, c: CheckResult) -> str:
    """One sentence: the check's summary, then where it first broke and the first divergent text."""
    f = first_active(c)
    head = f"**{md_text(model_label(m))}** {md_code(c.id)}: {md_text(c.summary)}"
    if c.status == "error" or f is None:
        return head + "."
    where = f"{md_text(f.scenario)}" + (f" at token {f.index}" if f.index is not None else "")
    d = divergence(f)
    if d is not None:
        return f"{head}; first in {where}: {d.sentence(quote=_quote)}."
    said = "" if f.message.strip() == c.summary.strip() else f": {md_text(f.message)}"
    return f"{head}; first in {where}{said}."


def compatibility_table(reports: Sequence[ModelReport], check_ids: Sequence[str] | None = None) -> str:
    """One row per model, one column per check, numbered notes for every ❌ and 💥; a library function so
    that ``tito-audit table`` and the corpus scan build the same document."""
    ids = list(check_ids) if check_ids is not None else [s.id for s in ordered_checks()]
    ids += [c.id for m in reports for c in m.checks if c.id not in ids]
    notes: list[str] = []

    def note(text: str) -> str:
        notes.append(text)
        return f"[^{len(notes)}]"

    rows = []
    for m in reports:
        rev = short_revision(m)
        row = {
            "model": md_text(model_label(m)) + (f" @{rev}" if rev else ""),
            "template": md_code(m.provenance.template_sha256[:8], True) if m.provenance else NOT_RUN,
            "verdict": f"{VERDICT_ICON[m.verdict]} {m.verdict}",
            "scenarios": f"{m.scenarios['played']}/{m.scenarios['catalogue']}"
            if "catalogue" in m.scenarios
            else NOT_RUN,
        }
        if m.error:
            row["verdict"] += note(f"**{md_text(model_label(m))}** could not be audited: {md_text(m.error)}.")
        elif verdict_reasons_text(m):
            row["verdict"] += note(f"**{md_text(model_label(m))}** verdict: {md_text(verdict_reasons_text(m))}.")
        by_id = {c.id: c for c in m.checks}
        for cid in ids:
            c = by_id.get(cid)
            if c is None:
                row[cid] = NOT_RUN
                continue
            row[cid] = STATUS_ICON[c.status]
            if c.status in ("fail", "error"):
                row[cid] += note(_footnote(m, c))
        rows.append(row)
    df = pd.DataFrame(rows, columns=["model", "template", "verdict", "scenarios", *ids])
    dates = sorted({_date(m) for m in reports if _date(m)})
    verdicts = " ".join(f"{VERDICT_ICON[v]} **{v}**: {md_text(VERDICTS[v])}." for v in VERDICTS)
    out = [
        "# Chat-template compatibility",
        "",
        "Generated by `tito-audit table`; regenerate this file with `scripts/make_compatibility_table.sh`. "
        f"Templates see the pinned date {', '.join(dates) or '-'}; `template` is the first 8 hex digits of the "
        "audited template's sha256; `scenarios` is scenarios played / catalogue (adaptations in the verdict note).",
        "",
        _table(df),
        "",
        f"Cells: {LEGEND}.",
        "",
        f"Verdicts: {verdicts}",
        "",
    ]
    if notes:
        out += ["## Notes", ""] + [f"[^{n}]: {text}" for n, text in enumerate(notes, 1)] + [""]
    return "\n".join(out)
