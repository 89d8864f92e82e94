"""Our own HTML pages (the audit report, the scan page), rendered from jinja2 templates with autoescape.

The templates live in ``formats/templates/`` (package data). They are tito-audit's own, trusted templates, not a
model's chat template (untrusted, only ever rendered in transformers' sandbox): a normal jinja2 ``Environment``
with ``autoescape=True``, so that every value from a report (text that came from a template, a tokenizer, a file
name) is escaped where the template writes it, and only what a template writes itself is markup.
``StrictUndefined``: a misspelt name is an error, never an empty string. jinja2 is imported when a page is
written, not when the formats register (``tito-audit --help`` imports this module).

Two details keep the pages byte-identical to what they were when written with ``html.escape``
(``scripts/report_identity.py`` compares them):

- markupsafe spells the escaped quotes ``&#34;`` and ``&#39;`` where ``html.escape`` spells ``&quot;`` and
  ``&#x27;`` (the same characters to a browser): the rendered page is given the latter. No value can produce
  either spelling otherwise, since the ``&`` of a value is itself escaped (``&amp;``).
- a template whose first line is a ``{#- one line ... -#}`` comment is one line of HTML: its line breaks and
  indentation are for reading, and the loader removes them (a line break the page needs is ``{{ "\\n" }}``).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

ONE_LINE = "{#- one line"
_BREAKS = re.compile(r"\n\s*")
_QUOTES = {"&#34;": "&quot;", "&#39;": "&#x27;"}


@cache
def _environment() -> Any:
    import jinja2

    class Loader(jinja2.PackageLoader):
        """The package's templates, with the line breaks of a one-line template removed."""

        def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Any]:
            source, filename, uptodate = super().get_source(environment, template)
            return (_BREAKS.sub("", source) if source.startswith(ONE_LINE) else source), filename, uptodate

    return jinja2.Environment(
        loader=Loader("tito_audit.formats", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )


def render_page(template: str, **values: Any) -> str:
    """The page ``template`` (a file of ``formats/templates/``) filled with ``values``, each escaped where written."""
    page = str(_environment().get_template(template).render(**values))
    return re.sub("&#34;|&#39;", lambda m: _QUOTES[m.group(0)], page)
