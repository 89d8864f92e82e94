"""Render a Markdown report (reports/compatibility.md, a --format markdown report, a scan --markdown summary) to
one HTML page, tables and footnote markers as a Markdown viewer shows them, to look at it in a browser:

    python scripts/markdown_to_html.py reports/compatibility.md /tmp/compat.html
    scripts/screenshot_html.sh /tmp/compat.html /tmp/compat.png 2400x1400

Uses markdown-it-py (installed with rich) with tables on and mdit-py-plugins' footnotes (``[^1]`` markers link to
numbered notes, each note its own list item; both in the dev extra); no fonts beyond the system's, so a page that
needs an emoji font shows it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from markdown_it import MarkdownIt
from mdit_py_plugins.footnote import footnote_plugin

CSS = """
body { font-family: sans-serif; font-size: 14px; margin: 24px; color: #1f2328; }
table { border-collapse: collapse; margin: 12px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
code { background: #eff1f3; padding: 1px 4px; border-radius: 4px; font-size: 12px; }
.footnotes li { margin: 4px 0; } .footnote-ref a { text-decoration: none; }
"""


def render(markdown: str) -> str:
    """The HTML body: CommonMark, tables and footnotes."""
    return MarkdownIt("commonmark").enable("table").use(footnote_plugin).render(markdown)


def main(src: str, dst: str) -> None:
    body = render(Path(src).read_text(encoding="utf-8"))
    page = f"<!doctype html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body>{body}</body></html>"
    Path(dst).write_text(page, encoding="utf-8")
    print(f"wrote {dst}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
