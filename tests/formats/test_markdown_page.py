"""scripts/markdown_to_html.py: the compatibility table's footnotes become links to numbered notes, one per note,
instead of literal ``[^1]`` markers and one run-together paragraph."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from tests.conftest import ROOT


def script():
    spec = importlib.util.spec_from_file_location("markdown_to_html", ROOT / "scripts" / "markdown_to_html.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compatibility_table_footnotes_are_links_to_separate_notes(tmp_path: Path) -> None:
    source = (ROOT / "reports" / "compatibility.md").read_text(encoding="utf-8")
    notes = re.findall(r"^\[\^(\d+)\]: ", source, flags=re.M)
    markers = re.findall(r"\[\^(\d+)\](?!:)", source)
    assert notes and set(markers) == set(notes)
    script().main(str(ROOT / "reports" / "compatibility.md"), str(tmp_path / "t.html"))
    page = (tmp_path / "t.html").read_text(encoding="utf-8")
    assert "[^" not in page  # no marker or note left as literal text
    assert len(re.findall(r'<sup class="footnote-ref"><a href="#fn\d+"', page)) == len(markers)
    items = re.findall(r'<li id="fn(\d+)" class="footnote-item">(.*?)</li>', page, flags=re.S)
    assert [n for n, _ in items] == notes  # one list item per note, in order
    first = dict(items)[notes[0]]
    assert "DeepSeek-V3" in first and "OLMo" not in first  # notes are not run together
