"""A scan as one page people can browse (``tito-audit scan FOLDER --html page.html``): the counts on top, then
every template with its class, its reasons, the tokenizer it was judged on (real, or approximate: synthesized
from the template's control tokens) and the first divergent text behind its verdict.

Self-contained: inline CSS and one inline script (filter by class and tokenizer kind, search by name and family;
the query string, ``?cls=unsafe&kind=approximate&q=qwen``, opens the page filtered), nothing fetched. Without the
script every row is shown. The markup is the template ``formats/templates/scan.html`` (jinja2, autoescape:
``formats/pages.py``); this module gives it the scan's values as text. Everything that came from a template or its
file name is untrusted and is escaped where the template writes it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from tito_audit._version import __version__
from tito_audit.report import scan_classes as classify
from tito_audit.report.verdict import describe_reason

if TYPE_CHECKING:
    from tito_audit.report.scan_report import ScanSummary, TemplateResult

NO_DIVERGENCE = {"safe": "none found in the scenarios played"}


def family(r: TemplateResult) -> str:
    """The tokenizer family a template was judged on: the candidate it matched, or the base its synthesized
    tokenizer was built on (picked from the template's own control tokens, never from its name)."""
    return r.tokenizer_base or r.tokenizer


def tokenizer_kind(r: TemplateResult) -> str:
    """``real``, ``stand-in`` (a real tokenizer none of whose added tokens the template writes: the first
    candidate, not one the template was written for), ``approximate`` (a verdict on a synthesized tokenizer) or
    ``none`` (no verdict)."""
    if r.cls not in classify.VERDICTS:
        return "none"
    if r.approximate:
        return "approximate"
    return "stand-in" if r.stand_in else "real"


def reasons(r: TemplateResult) -> list[str]:
    """Why the template is in its class: the audit's verdict reasons in words, or why there is no verdict."""
    if r.cls in classify.VERDICTS:
        return [describe_reason(x) for x in r.verdict_reasons] or [classify.DESCRIPTIONS[r.cls]]
    return [r.reason or classify.DESCRIPTIONS.get(r.cls, r.cls)]


def row_id(name: str) -> str:
    """A stable fragment id per template, so that a row (and its first divergent text) can be linked to."""
    return "t-" + re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")


def _style(cls: str) -> str:
    """The badge colour of a class: a verdict's own, else the one of "no verdict"."""
    return cls if cls in classify.VERDICTS else "none"


def _row(r: TemplateResult) -> dict[str, Any]:
    fam = family(r)
    return {
        "id": row_id(r.name),
        "name": r.name,
        "cls": r.cls,
        "style": _style(r.cls),
        "kind": tokenizer_kind(r),
        "search": " ".join(dict.fromkeys([r.name, fam, r.tokenizer])).lower(),
        "family": fam,
        "tokenizer": r.tokenizer,
        "tokenizer_reason": r.tokenizer_reason,
        "reasons": reasons(r),
        "divergent": r.first_divergence or NO_DIVERGENCE.get(r.cls, "—"),
    }


def _count_button(summary: ScanSummary, cls: str, n: int) -> dict[str, Any]:
    approx = summary.approximate_counts.get(cls, 0)
    note = f"{approx} approximate" if approx else classify.DESCRIPTIONS.get(cls, "")
    return {"cls": cls, "style": _style(cls), "n": n, "note": note, "title": classify.DESCRIPTIONS.get(cls, "")}


def to_html(summary: ScanSummary) -> str:
    from tito_audit.formats.pages import render_page

    judged = summary.to_dict()["verdicts"]
    return render_page(
        "scan.html",
        root=summary.root,
        total=len(summary.results),
        tokenizer=summary.tokenizer,
        scenarios=str(summary.meta.get("scenarios", "")),
        real=judged["real"],
        approximate=judged["approximate"],
        stand_in=judged["stand_in"],
        status=summary.status,
        version=__version__,
        buttons=[_count_button(summary, c, n) for c, n in summary.counts.items()],
        rows=[_row(r) for r in summary.results],
    )
