"""A scan as one page people can browse (``tito-audit scan FOLDER --html page.html``): the counts on top, then
every template with its class, its reasons, the tokenizer it was judged on (real, or approximate: synthesized
from the template's control tokens) and the first divergent text behind its verdict.

Self-contained: inline CSS and one inline script (filter by class and tokenizer kind, search by name and family),
nothing fetched. Without the script every row is shown. Everything that came from a template or its file name
is untrusted and goes through ``html.escape``.
"""

from __future__ import annotations

import re
from html import escape
from typing import TYPE_CHECKING

from tito_audit._version import __version__
from tito_audit.report import scan_classes as classify
from tito_audit.report.verdict import describe_reason

if TYPE_CHECKING:
    from tito_audit.report.scan_report import ScanSummary, TemplateResult

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --panel:#f6f8fa;
  --safe:#1a7f37; --req:#9a6700; --unsafe:#cf222e; --none:#8250df; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg); margin: 0;
  padding: 20px 28px 60px; }
h1 { font-size: 22px; margin: 0 0 2px; } .sub { color: var(--muted); margin: 0 0 14px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
.counts { display: flex; flex-wrap: wrap; gap: 8px; margin: 0 0 12px; }
.count { border: 1px solid var(--line); border-radius: 8px; padding: 6px 12px; background: #fff; cursor: pointer;
  font: inherit; text-align: left; min-width: 120px; }
.count[aria-pressed="true"] { outline: 2px solid #0969da; background: #ddf4ff; }
.count b { display: block; font-size: 20px; } .count small { color: var(--muted); }
.controls { display: flex; flex-wrap: wrap; gap: 12px; align-items: center; margin: 0 0 10px;
  background: var(--panel); border-radius: 8px; padding: 8px 12px; }
.controls input[type=search] { font: inherit; padding: 4px 8px; width: 320px; border: 1px solid var(--line);
  border-radius: 6px; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; }
col.c-name { width: 19%; } col.c-cls { width: 9%; } col.c-tok { width: 15%; } col.c-why { width: 25%; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: var(--panel); position: sticky; top: 0; }
td.name { font-weight: 600; overflow-wrap: anywhere; }
td.name a { color: inherit; text-decoration: none; } td.name a:hover { text-decoration: underline; }
td.why ul { margin: 0; padding-left: 16px; } td.why, td.div { overflow-wrap: anywhere; }
td.tok small { color: var(--muted); display: block; overflow-wrap: anywhere; }
.badge { font-weight: 700; color: #fff; border-radius: 5px; padding: 1px 8px; white-space: nowrap; }
.c-unsafe { background: var(--unsafe); } .c-tito-required { background: var(--req); }
.c-safe { background: var(--safe); } .c-none { background: var(--none); }
.approx { color: var(--req); font-weight: 600; }
tr:target { background: #fff8c5; }
"""

# The one inline script: filters rows by class (the count buttons), tokenizer kind and a search over name and family;
# the query string (?cls=unsafe&kind=approximate&q=qwen) opens the page filtered.
SCRIPT = """
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('#templates tbody tr'));
  var buttons = Array.prototype.slice.call(document.querySelectorAll('button.count'));
  var search = document.getElementById('search'), kind = document.getElementById('kind');
  var shown = document.getElementById('shown'), picked = {};
  function apply() {
    var q = search.value.trim().toLowerCase(), k = kind.value, any = Object.keys(picked).length > 0, n = 0;
    rows.forEach(function (r) {
      var ok = (!any || picked[r.dataset.cls]) && (k === 'all' || r.dataset.kind === k)
        && (!q || r.dataset.search.indexOf(q) >= 0);
      r.hidden = !ok; if (ok) n += 1;
    });
    shown.textContent = n;
  }
  buttons.forEach(function (b) {
    b.addEventListener('click', function () {
      var c = b.dataset.countClass;
      if (picked[c]) { delete picked[c]; } else { picked[c] = true; }
      b.setAttribute('aria-pressed', picked[c] ? 'true' : 'false');
      apply();
    });
  });
  search.addEventListener('input', apply); kind.addEventListener('change', apply);
  // A filtered view is a link: ?cls=unsafe,safe&kind=approximate&q=qwen
  var params = new URLSearchParams(window.location.search);
  (params.get('cls') || '').split(',').forEach(function (c) {
    buttons.forEach(function (b) {
      if (c && b.dataset.countClass === c) { picked[c] = true; b.setAttribute('aria-pressed', 'true'); }
    });
  });
  if (params.get('kind')) { kind.value = params.get('kind'); }
  if (params.get('q')) { search.value = params.get('q'); }
  document.getElementById('controls').hidden = false;
  apply();
})();
"""


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


def _badge(cls: str) -> str:
    style = cls if cls in classify.VERDICTS else "none"
    return f'<span class="badge c-{style}">{escape(cls)}</span>'


def _row(r: TemplateResult) -> str:
    kind = tokenizer_kind(r)
    fam = family(r)
    if kind == "approximate":
        tok = f'<span class="approx">approximate</span><small>synthesized on {escape(fam)}</small>'
    elif kind == "real":
        tok = f"real<small>{escape(r.tokenizer)}</small>"
    elif kind == "stand-in":
        tok = (
            '<span class="approx">stand-in</span>'
            f"<small>{escape(r.tokenizer)}: none of its added tokens in the template</small>"
        )
    else:
        tok = f"—<small>{escape(r.tokenizer)}</small>"
    why = "".join(f"<li>{escape(x)}</li>" for x in reasons(r))
    divergent = escape(r.first_divergence or NO_DIVERGENCE.get(r.cls, "—"))
    search = " ".join(dict.fromkeys([r.name, fam, r.tokenizer])).lower()
    rid = row_id(r.name)
    return (
        f'<tr id="{escape(rid)}" data-cls="{escape(r.cls)}" data-kind="{kind}" data-search="{escape(search)}">'
        f'<td class="name"><a href="#{escape(rid)}">{escape(r.name)}</a></td>'
        f"<td>{_badge(r.cls)}</td>"
        f'<td class="tok" title="{escape(r.tokenizer_reason)}">{tok}</td>'
        f'<td class="why"><ul>{why}</ul></td>'
        f'<td class="div"><code>{divergent}</code></td></tr>'
    )


def _count_button(summary: ScanSummary, cls: str, n: int) -> str:
    approx = summary.approximate_counts.get(cls, 0)
    note = f"{approx} approximate" if approx else classify.DESCRIPTIONS.get(cls, "")
    return (
        f'<button class="count" type="button" aria-pressed="false" data-count-class="{escape(cls)}" '
        f'title="{escape(classify.DESCRIPTIONS.get(cls, ""))}">{_badge(cls)}'
        f'<b data-count="{escape(cls)}">{n}</b><small>{escape(note)}</small></button>'
    )


def to_html(summary: ScanSummary) -> str:
    counts = summary.counts
    total = len(summary.results)
    judged = summary.to_dict()["verdicts"]
    head = (
        f"{total} templates, tokenizer {escape(summary.tokenizer)}, "
        f"scenarios {escape(str(summary.meta.get('scenarios', '')))}; "
        f"{judged['real']} verdicts on a real tokenizer ({judged['stand_in']} of them on a stand-in: a candidate "
        f"none of whose added tokens the template writes), {judged['approximate']} approximate "
        "(on a tokenizer synthesized from the template's own control tokens). "
        f"tito-audit {escape(__version__)}."
    )
    if summary.status:
        head = f"<strong>{escape(summary.status)}</strong>. {head}"
    buttons = "".join(_count_button(summary, c, n) for c, n in counts.items())
    rows = "\n".join(_row(r) for r in summary.results)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Template scan: {escape(summary.root)}</title>
<style>{CSS}</style></head>
<body>
<h1>Template scan: <span class="mono">{escape(summary.root)}</span></h1>
<p class="sub">{head}</p>
<div class="counts" id="counts" data-total="{total}">{buttons}</div>
<div class="controls" id="controls" hidden>
<label>Search name or family <input type="search" id="search" placeholder="e.g. qwen, llama, deepseek-v3"></label>
<label>Tokenizer <select id="kind"><option value="all">all</option><option value="real">real</option>
<option value="stand-in">stand-in</option><option value="approximate">approximate</option>
<option value="none">no verdict</option></select></label>
<span>showing <b id="shown">{total}</b> of {total}; click a count to filter by class</span>
</div>
<table id="templates"><colgroup><col class="c-name"><col class="c-cls"><col class="c-tok"><col class="c-why"><col>
</colgroup><thead><tr><th>template</th><th>class</th><th>tokenizer</th><th>reasons</th>
<th>first divergence</th></tr></thead>
<tbody>
{rows}
</tbody></table>
<script>{SCRIPT}</script>
</body></html>
"""
