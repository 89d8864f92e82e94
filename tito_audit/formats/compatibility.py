"""The cross-model compatibility table (``tito-audit table``, reports/compatibility.md): which models differ,
and why, at a glance.

One row per model: a bundled copy whose audit is identical to its Hub original is named in that row, not
repeated. A check with the same status for every model is a property of all of them, said once under the
table instead of as a column of identical cells. Every row carries the verdict's reason. Cells are words, not
emoji: the page reads the same without an emoji font, and the pipe table's padding does not depend on how an
optional package (wcwidth) measures emoji.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tito_audit.formats.divergence import divergence, first_active
from tito_audit.formats.labels import (
    approximate_note,
    model_label,
    models_libraries,
    short_revision,
    verdict_reasons,
    versions_text,
)
from tito_audit.formats.markdown import md_code, md_text, table_markdown
from tito_audit.report.quote import clipped
from tito_audit.report.verdict import VERDICTS

if TYPE_CHECKING:
    from tito_audit.report.check_result import CheckResult
    from tito_audit.report.model_report import ModelReport

NOT_RUN = "—"
CELL = {"pass": "pass", "warn": "warn", "fail": "**FAIL**", "not_applicable": "n/a", "error": "**error**"}
VERDICT_CELL = {"unsafe": "**UNSAFE**", "tito-required": "tito-required", "safe": "safe", "error": "**ERROR**"}
REASON_LIMIT = 160  # characters of each reason in the row; the notes carry the first divergent text
LEGEND = (
    "`pass`; `warn` (a warning-level check found something); `FAIL` (an error-level check failed; the numbered "
    f"note says where); `n/a` (not applicable); `error` (the check could not run); `{NOT_RUN}` not run"
)


def _quote(text: str) -> str:
    return md_code(repr(text))


def _date(m: ModelReport) -> str:
    return str(m.options.get("date", ""))[:10]


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


def _identity(m: ModelReport) -> tuple[object, ...]:
    """Two reports are one row when they audit the same repository revision, template and tokenizer file and
    every check came out the same (a bundled copy of a Hub model)."""
    p = m.provenance
    if p is None or not p.repo_id or not p.revision:
        return ("spec", m.model)
    statuses = tuple((c.id, c.status, len(c.active_findings)) for c in m.checks)
    return (p.repo_id, p.revision, p.template_sha256, p.files.get("tokenizer.json"), m.verdict, statuses)


def one_row_per_model(reports: Sequence[ModelReport]) -> list[tuple[ModelReport, list[str]]]:
    """``(report shown, other names of the same model)`` in first-seen order; the Hub copy is the one shown."""
    groups: dict[tuple[object, ...], list[ModelReport]] = {}
    for m in reports:
        groups.setdefault(_identity(m), []).append(m)
    rows = []
    for same in groups.values():
        shown = next((m for m in same if m.provenance and m.provenance.source == "hub"), same[0])
        rows.append((shown, [model_label(m) for m in same if m is not shown]))
    return rows


def _first_sentence(markdown: str) -> str:
    text = " ".join(markdown.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return match.group(1) if match else text


def _row(m: ModelReport, aliases: list[str], columns: list[str], note: Callable[[str], str]) -> dict[str, str]:
    """One model's row; ``note`` numbers a footnote (approximate verdict, audit error, each FAIL and error)."""
    rev = short_revision(m)
    name = md_text(model_label(m)) + (f" @{rev}" if rev else "")
    if aliases:
        name += " (bundled: " + ", ".join(md_code(a, True) for a in aliases) + ")"
    row = {
        "model": name,
        "template": md_code(m.provenance.template_sha256[:8], True)
        if m.provenance and m.provenance.template_sha256
        else NOT_RUN,
        "verdict": VERDICT_CELL[m.verdict],
        "scenarios": f"{m.scenarios['played']}/{m.scenarios['catalogue']}" if "catalogue" in m.scenarios else NOT_RUN,
        "why": "; ".join(md_text(clipped(r, REASON_LIMIT)) for r in verdict_reasons(m)[:2]),
    }
    approx = approximate_note(m)
    if approx:
        row["verdict"] += " (approximate)" + note(f"**{md_text(model_label(m))}**: {md_text(approx)}.")
    if m.error:
        row["verdict"] += note(f"**{md_text(model_label(m))}** could not be audited: {md_text(m.error)}.")
    by_id = {c.id: c for c in m.checks}
    for cid in columns:
        c = by_id.get(cid)
        if c is None:
            row[cid] = NOT_RUN
            continue
        row[cid] = CELL[c.status]
        if c.status in ("fail", "error"):
            row[cid] += note(_footnote(m, c))
    return row


def compatibility_table(reports: Sequence[ModelReport], check_ids: Sequence[str] | None = None) -> str:
    """The Markdown document: a row per model, a column per check that tells models apart, the checks that
    do not said once, numbered notes for every FAIL and error; a library function so that ``tito-audit table``
    and scripts build the same document."""
    from tito_audit.audit.checks import ordered_checks  # (the checks load the audit: not when formats register)

    ids = list(check_ids) if check_ids is not None else [s.id for s in ordered_checks()]
    ids += [c.id for m in reports for c in m.checks if c.id not in ids]
    rows_of = one_row_per_model(reports)
    audited = [m for m, _ in rows_of if not m.error]
    status = {cid: {m.model: next((c.status for c in m.checks if c.id == cid), None) for m in audited} for cid in ids}
    # A column that is the same for every audited model (two or more) says nothing about which model to pick.
    shared = [
        cid for cid in ids if len(audited) >= 2 and {*status[cid].values()} in ({"pass"}, {"warn"}, {"not_applicable"})
    ]
    columns = [cid for cid in ids if cid not in shared]
    notes: list[str] = []

    def note(text: str) -> str:
        notes.append(text)
        return f"[^{len(notes)}]"

    rows = [_row(m, aliases, columns, note) for m, aliases in rows_of]
    import pandas as pd  # only for this table: a third of a second of every cold start otherwise

    df = pd.DataFrame(rows, columns=["model", "template", "verdict", "scenarios", "why", *columns])
    dates = sorted({_date(m) for m in reports if _date(m)})
    verdicts = " ".join(f"**{v}**: {md_text(VERDICTS[v])}." for v in VERDICTS)
    specs = {s.id: s for s in ordered_checks()}
    out = [
        "# Chat-template compatibility",
        "",
        "Generated by `tito-audit table`; regenerate this file with `scripts/make_compatibility_table.sh`. "
        f"Templates see the pinned date {', '.join(dates) or '-'}; `template` is the first 8 hex digits of the "
        "audited template's sha256; `scenarios` is scenarios played / catalogue; `why` is the verdict's reason "
        "(adaptations the rollout code must make too are named there). A bundled copy whose audit equals its Hub "
        "model's shares that row.",
        "",
        f"Audited with {versions_text(models_libraries(reports))}.",
        "",
        table_markdown(df),
        "",
        f"Cells: {LEGEND}.",
        "",
        f"Verdicts: {verdicts}",
        "",
    ]
    if shared:
        out += ["## The same for every model", ""]
        for cid in shared:
            word = CELL[str(next(iter(status[cid].values())))]
            spec = specs.get(cid)
            about = f"{md_text(spec.title)}. {_first_sentence(spec.explanation)}" if spec else ""
            out.append(f"- {md_code(cid)}: `{word}` for all {len(audited)} models. {about}")
        out.append("")
    if notes:
        out += ["## Notes", ""] + [f"[^{n}]: {text}" for n, text in enumerate(notes, 1)] + [""]
    return "\n".join(out)
