"""`tito-audit scan --html`: one self-contained page whose counts, rows and texts are the scan's JSON."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import CORPUS, ROOT, needs_corpus
from tito_audit.cli import app
from tito_audit.formats.scan_page import NO_DIVERGENCE

# One template per kind of row: real and approximate verdicts of every kind, and one without a verdict.
CORPUS_TEMPLATES = (
    "01-ai-Yi-1.5-9B-Chat",  # unsafe, real tokenizer
    "0xA50C1A1-Mistral-Nemo-Instruct-2407-Heretic-v2",  # tito-required, real
    "Apertus-8B-Instruct",  # tito-required, approximate
    "ApolloRaines-Llama-3.3-8B-Instruct-128K-Jbliterated",  # safe, approximate
)
# A template that rejects every conversation (always_raises). Command-R+'s tool_use template was one until its
# flat tool schema was read (scenarios.adapt.TOOL_SCHEMAS).
ALWAYS_RAISES = "{% for m in messages %}{{ raise_exception('this template takes no ' + m.role + ' turn') }}{% endfor %}"
HOSTILE_NAME = "<img src=x onerror=alert(1)> & co"  # a file name is untrusted text too

pytestmark = [needs_corpus, pytest.mark.slow]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("page") / "templates"
    out.mkdir()
    for name in CORPUS_TEMPLATES:
        shutil.copy(CORPUS / f"{name}.jinja", out / f"{name}.jinja")
    shutil.copy(ROOT / "templates_cache" / "qwen2.5-7b-instruct" / "chat_template.jinja", out / "qwen2.5.jinja")
    (out / "always-raises.jinja").write_text(ALWAYS_RAISES, encoding="utf-8")
    (out / f"{HOSTILE_NAME}.jinja").write_text("{% for m in messages %}{{ m.content }", encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def scanned(folder: Path) -> tuple[dict, str]:
    page, summary = folder.parent / "page.html", folder.parent / "scan.json"
    r = CliRunner().invoke(
        app, ["scan", str(folder), "--workers", "0", "--no-progress", "--json", str(summary), "--html", str(page)]
    )
    assert r.exit_code == 0, r.output
    return json.loads(summary.read_text(encoding="utf-8")), page.read_text(encoding="utf-8")


class Page(HTMLParser):
    """The parts of the page a reader uses: count buttons, template rows (their cells' text), ids, resources."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.counts: dict[str, int] = {}
        self.rows: list[dict] = []
        self.ids: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[str] = []
        self._count: str | None = None
        self._cell: list[str] | None = None
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "b" and "data-count" in a:
            self._count = a["data-count"]
        if tag == "tr" and "data-cls" in a:
            self.rows.append({**a, "cells": []})
        if tag == "td" and self.rows:
            self._cell = []
            self.rows[-1]["cells"].append(self._cell)
        if tag == "script":
            self._in_script = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = None
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._count is not None:
            self.counts[self._count] = int(data)
            self._count = None
        if self._cell is not None:
            self._cell.append(data)
        if self._in_script:
            self.scripts[-1] += data


def parsed(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def test_counts_on_top_and_rows_match_the_json(scanned: tuple[dict, str]) -> None:
    summary, html = scanned
    page = parsed(html)
    assert summary["templates"] == len(CORPUS_TEMPLATES) + 3 == len(page.rows)  # + qwen2.5, always-raises, hostile
    assert page.counts == summary["counts"]
    assert {"unsafe", "tito-required", "safe", "always_raises", "does_not_compile"} <= set(page.counts)
    for cls, n in summary["counts"].items():
        assert sum(r["data-cls"] == cls for r in page.rows) == n
    approximate = {
        c: sum(r["data-cls"] == c and r["data-kind"] == "approximate" for r in page.rows) for c in page.counts
    }
    assert {c: n for c, n in approximate.items() if n} == summary["approximate"] != {}


def test_each_row_says_class_reasons_tokenizer_and_first_divergence(scanned: tuple[dict, str]) -> None:
    from tito_audit.report.verdict import describe_reason

    summary, html = scanned
    rows = {"".join(r["cells"][0]): r for r in parsed(html).rows}
    assert set(rows) == {r["name"] for r in summary["results"]}
    for result in summary["results"]:
        row = rows[result["name"]]
        _name, cls, tokenizer, reasons, divergence = ("".join(c) for c in row["cells"])
        assert cls == result["cls"] == row["data-cls"]
        assert result["tokenizer"] in tokenizer or (result["tokenizer_base"] or "") in tokenizer
        assert row["data-kind"] == (
            "none"
            if result["verdict"] is None
            else "approximate"
            if result["approximate"]
            else "stand-in"
            if result["stand_in"]
            else "real"
        )
        if result["verdict"] is None:
            assert result["reason"] and result["reason"] in reasons
        else:
            assert all(describe_reason(x) in reasons for x in result["verdict_reasons"])
        assert divergence == (result["first_divergence"] or NO_DIVERGENCE.get(result["cls"], "—"))
        # the search covers the name and the family (the tokenizer it was judged on)
        assert result["name"].lower() in row["data-search"]
        assert (result["tokenizer_base"] or result["tokenizer"]).lower() in row["data-search"]
    # a verdict other than safe names where the buffer and the re-render first part
    diverging = [r for r in summary["results"] if r["verdict"] == "tito-required"]
    assert diverging and all("buffer has" in r["first_divergence"] for r in diverging)


def test_page_is_self_contained_and_escapes_names(scanned: tuple[dict, str]) -> None:
    _, html = scanned
    page = parsed(html)
    assert len(page.ids) == len(set(page.ids))
    for tag, attrs in page.tags:
        assert "src" not in attrs, (tag, attrs)  # no script, image or frame from anywhere
        assert tag not in ("link", "iframe", "img", "object", "embed"), tag
        assert not attrs.get("href", "#").split("#")[0], attrs  # only links within the page
        assert not any(k.startswith("on") for k in attrs), attrs  # no inline handlers (names are untrusted)
    assert "@import" not in html and "url(" not in html
    assert len(page.scripts) == 1 and "fetch(" not in page.scripts[0] and "XMLHttpRequest" not in page.scripts[0]
    assert HOSTILE_NAME not in html and "&lt;img src=x onerror=alert(1)&gt; &amp; co" in html
    assert {t for t, a in page.tags if a.get("id") in ("search", "kind")} == {"input", "select"}


def test_a_template_no_candidate_was_written_for_is_judged_on_a_stand_in(tmp_path: Path) -> None:
    """A template that writes none of any candidate's added tokens is audited on the first candidate: a real
    tokenizer, but not its own family's. The page says "stand-in", never "real"; one that writes its tokenizer's
    tokens stays "real"."""
    folder = tmp_path / "t"
    folder.mkdir()
    shutil.copy(CORPUS / "Intel-neural-chat-7b-v3-3.jinja", folder / "plain-markup.jinja")
    shutil.copy(ROOT / "templates_cache" / "qwen2.5-7b-instruct" / "chat_template.jinja", folder / "qwen2.5.jinja")
    page, summary = tmp_path / "page.html", tmp_path / "scan.json"
    r = CliRunner().invoke(
        app, ["scan", str(folder), "--workers", "0", "--no-progress", "--json", str(summary), "--html", str(page)]
    )
    assert r.exit_code == 0, r.output
    by_name = {x["name"]: x for x in json.loads(summary.read_text())["results"]}
    assert by_name["plain-markup"]["stand_in"] is True and by_name["plain-markup"]["verdict"] is not None
    assert by_name["qwen2.5"]["stand_in"] is False
    rows = {row["id"]: row for row in parsed(page.read_text()).rows}
    assert rows["t-plain-markup"]["data-kind"] == "stand-in" and rows["t-qwen2.5"]["data-kind"] == "real"
    assert "none of its added tokens in the template" in page.read_text()
