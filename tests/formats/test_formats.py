"""Every output format from the same audit of real shared models: Qwen3 fails tool_append_prefix (its empty
think block disappears once a tool result follows), Qwen2.5 is safe."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import ROOT
from tito_audit.audit.checks import ordered_checks
from tito_audit.cli import app
from tito_audit.formats import OUTPUT_FORMATS, render_report
from tito_audit.formats.compatibility import compatibility_table
from tito_audit.formats.divergence import divergence
from tito_audit.formats.html import to_html
from tito_audit.formats.sarif import artifact_uri, to_sarif_dict
from tito_audit.report.findings import TokenSide
from tito_audit.report.model_report import AuditReport
from tito_audit.report.rl_artifacts import read_rl_dir

UNSAFE, SAFE = "Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-7B-Instruct"
HOSTILE = '<script>alert("x")</script>'


@pytest.fixture(scope="module")
def both(report) -> AuditReport:
    return AuditReport([report(UNSAFE), report(SAFE)])


def _first_fail(r: AuditReport):
    c = r.models[0].check("tool_append_prefix")
    assert c.status == "fail"
    return c, next(f for f in c.findings if f.expected is not None)


# --- the divergence every format quotes ---------------------------------------------------------------------


def test_divergence_is_the_dropped_think_block(both):
    _, f = _first_fail(both)
    d = divergence(f)
    assert d is not None
    assert "".join(d.buffered).startswith("<think>") and "</think>" in "".join(d.buffered)
    assert "".join(d.rerendered) == ""  # the re-render simply has no think block there
    assert d.sentence().startswith("buffer has '<think>")


def test_divergence_of_a_different_split_shows_the_tokens(both):
    """Round-trip findings have the same text on both sides: the sentence must show the token split."""
    rt = both.models[0].check("roundtrip")
    f = next(f for f in rt.findings if f.cls == "non_canonical")
    d = divergence(f)
    assert d is not None and "".join(d.buffered) == "".join(d.rerendered)
    assert "same text, different tokens" in d.sentence() and " + " in d.sentence()


# --- markdown -----------------------------------------------------------------------------------------------


def _table_rows(md: str) -> list[list[str]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|") and not ln.startswith("|:")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines]


def test_markdown_report_has_verdicts_checks_and_findings(both):
    md = render_report(both, "markdown")
    assert "## `Qwen/Qwen3-0.6B` — ❌ UNSAFE" in md and "## `Qwen/Qwen2.5-7B-Instruct` — ✅ SAFE" in md
    unsafe_section, safe_section = md.split("## `Qwen/Qwen2.5-7B-Instruct`")
    rows = {r[0]: r for r in _table_rows(unsafe_section) if r and r[0].startswith("`")}
    assert rows["`tool_append_prefix`"][1] == "❌ fail"
    rows = {r[0]: r for r in _table_rows(safe_section) if r and r[0].startswith("`")}
    assert rows["`tool_append_prefix`"][1] == "✅ pass"
    assert "`87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5`" in md  # template sha256
    assert "where the re-render has `''`" in md
    prose = re.sub(r"(`+).*?\1", "", md)  # outside code spans, template text must be escaped
    assert "<think>" not in prose and r"\<think\>" in prose


def test_compatibility_table_cells_and_footnotes(both):
    md = compatibility_table(both.models)
    header, *rows = _table_rows(md)
    assert header[:5] == ["model", "template", "verdict", "scenarios", "why"]
    shared = re.findall(r"^- `(\w+)`: `([^`]+)` for all 2 models", md, re.M)
    assert sorted(header[5:] + [cid for cid, _ in shared]) == sorted(s.id for s in ordered_checks())  # each once
    col = header.index("tool_append_prefix")
    by_model = {r[0].split(" @")[0]: r for r in rows}
    assert by_model[UNSAFE][col] == "**FAIL**[^1]" and by_model[UNSAFE][2] == "**UNSAFE**"
    assert by_model[SAFE][col] == "pass" and by_model[SAFE][2] == "safe"
    # scenarios played / catalogue: Qwen3 adds reasoning_empty/plain in its three thinking modes (derived scenarios);
    # both play code_args and long_answer (single call, follow-up) and long_episode/plain
    assert by_model[UNSAFE][3] == "64/64" and by_model[SAFE][3] == "47/47"
    assert by_model[UNSAFE][0] == f"{UNSAFE} @9b9325d"  # name with short revision
    assert "rewrites the history when tool results are appended" in by_model[UNSAFE][4]  # the verdict's reason
    note = next(ln for ln in md.splitlines() if ln.startswith("[^1]:"))
    assert "`tool_append_prefix`" in note and "buffer has `'<think>\\n\\n</think>" in note
    assert "where the re-render has `''`" in note
    cells = {c for r in rows for c in r[5:]}
    assert cells <= {"pass", "warn", "n/a", "**error**", "—"} | {f"**FAIL**[^{n}]" for n in range(1, 20)}


def test_compatibility_table_escapes_hostile_summaries(both):
    hostile = copy.deepcopy(both)
    c, _ = _first_fail(hostile)
    c.summary = f"{HOSTILE} | broken"
    md = compatibility_table(hostile.models)
    assert "<script>" not in md and r"\<script\>" in md and r"\| broken" in md


# --- HTML ---------------------------------------------------------------------------------------------------

VOID = {"meta", "img", "br", "hr", "link", "input", "col", "wbr", "area", "base", "source"}


class Checker(HTMLParser):
    """Well-formedness (every non-void tag closed in order) plus what the page references and its spans."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.refs: list[str] = []
        self.spans: list[dict[str, str]] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.refs += [a[k] for k in ("src", "href", "action", "data") if k in a]
        self.scripts += tag == "script"
        if tag == "span":
            self.spans.append(a)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


def _parse(html: str) -> Checker:
    p = Checker()
    p.feed(html)
    p.close()
    assert p.errors == [] and p.stack == [], (p.errors, p.stack)
    return p


def test_html_is_self_contained_and_well_formed(both):
    html = render_report(both, "html")
    p = _parse(html)
    assert p.scripts == 0
    assert not [r for r in p.refs if re.match(r"\s*(https?:)?//", r, re.I)]
    assert not re.search(r"url\(|@import", html)  # no CSS fetches either
    assert 'class="verdict v-unsafe"' in html and 'class="verdict v-safe"' in html
    assert "Fix:" in html and both.models[0].check("tool_append_prefix").explanation.split()[0] in html


def test_html_highlights_the_divergent_token_with_its_id(both):
    _, f = _first_fail(both)
    assert f.expected is not None and f.index is not None and f.context_start is not None
    k = f.index - f.context_start
    want = f"id {f.expected.ids[k]} · {f.expected.tokens[k]!r}"
    p = _parse(render_report(both, "html"))
    firsts = [s for s in p.spans if "first" in s.get("class", "").split()]
    assert any(s.get("title") == want for s in firsts), want
    assert any("↵" in s.get("title", "") or s.get("title", "").endswith("'\\n'") for s in p.spans)


def test_html_escapes_hostile_template_text(both):
    hostile = copy.deepcopy(both)
    _, f = _first_fail(hostile)
    f.message = HOSTILE
    f.scenario = f'"><img src=x onerror=alert(1)>{HOSTILE}'
    assert f.expected is not None and f.index is not None and f.context_start is not None
    f.expected = TokenSide(list(f.expected.ids), list(f.expected.tokens))
    f.expected.tokens[f.index - f.context_start] = f'" onmouseover="x{HOSTILE}'
    html = to_html(hostile)
    p = _parse(html)
    assert p.scripts == 0 and "<script" not in html.lower() and "<img src=x" not in html
    assert "&lt;script&gt;" in html
    assert not any("onmouseover" in k or "onerror" in k for s in p.spans for k in s)


def _png() -> bytes:
    """A valid 1x1 PNG (what matplotlib would write, minus matplotlib)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0\0\0\0")) + chunk(b"IEND", b"")
    )


def _fake_rl_dir(tmp_path: Path, template_sha256: str = "") -> Path:
    """What `tito-audit rl --out DIR` writes: metrics.json (config/setup/summary/steps/files) and PNGs."""
    (tmp_path / "gradient.png").write_bytes(_png())
    (tmp_path / "kl.png").write_text(HOSTILE)  # not a PNG: must not be embedded
    metrics = {
        "config": {"model": UNSAFE, "steps": 2},
        "setup": {"policy": "random qwen2 2x64", "template_sha256": template_sha256},
        "summary": {
            "cosine_min": 0.2644282796175598,
            "corrupted": True,
            "verdict": "corrupted",
            "sequences": 16,
            "holds_for": "canonical samples only",
            "what_to_do": ["keep a token buffer (check_batch)"],
        },
        "steps": [],
        "files": [str(tmp_path / "gradient.png"), str(tmp_path / "metrics.json")],
    }
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    return tmp_path


def test_html_embeds_rl_plots_as_data_uris(both, tmp_path):
    rl = read_rl_dir(_fake_rl_dir(tmp_path))
    assert list(rl.plots) == ["gradient.png"]
    html = to_html(both, rl=rl)
    p = _parse(html)
    assert [r[:22] for r in p.refs] == ["data:image/png;base64,"]
    assert "R GRADIENT CORRUPTED" in html and "0.2644" in html and "lowest gradient cosine" in html
    assert "What to do" in html and "keep a token buffer (check_batch)" in html and "holds for" in html


def test_read_rl_dir_rejects_a_folder_without_metrics(tmp_path):
    with pytest.raises(ValueError, match=r"no metrics\.json"):
        read_rl_dir(tmp_path)


# --- SARIF --------------------------------------------------------------------------------------------------


def test_sarif_structure(both):
    hostile = copy.deepcopy(both)
    _, f = _first_fail(hostile)
    f.suppressed, f.suppression_reason = True, "patched template ships in v2"
    log = json.loads(render_report(hostile, "sarif"))
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [s.id for s in ordered_checks()]
    assert all(r["fullDescription"]["text"] and r["help"]["text"].startswith("Fix: ") for r in rules)
    results = run["results"]
    # One result per check and root cause (class), suppressed findings apart; every finding counted once.
    causes = {(m.model, ch.id, f.cls, f.suppressed) for m in hostile.models for ch in m.checks for f in ch.findings}
    assert len(results) == len(causes) < sum(len(ch.findings) for m in hostile.models for ch in m.checks)
    assert sum(r["properties"]["findings"] for r in results) == sum(
        len(ch.findings) for m in hostile.models for ch in m.checks
    )
    for res in results:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning") and res["message"]["text"]
        loc = res["locations"][0]
        assert loc["logicalLocations"][0]["name"]
        # GitHub code scanning rejects results without a relative physical location.
        uri = loc["physicalLocation"]["artifactLocation"]["uri"]
        assert uri.endswith("chat_template.jinja") and not uri.startswith("/")
        assert loc["physicalLocation"]["region"]["startLine"] >= 1
    suppressed = [r for r in results if "suppressions" in r]
    assert len(suppressed) == 1
    assert suppressed[0]["suppressions"] == [
        {"kind": "external", "status": "accepted", "justification": "patched template ships in v2"}
    ]
    fails = [r for r in results if r["ruleId"] == "tool_append_prefix"]
    assert fails and all(r["level"] == "error" for r in fails)
    assert run["invocations"][0]["executionSuccessful"] is True


def test_sarif_location_of_a_custom_template_is_relative(both):
    m = copy.deepcopy(both.models[0])
    assert m.provenance is not None
    m.provenance = dataclasses.replace(m.provenance, template_file="templates/qwen3-tito.jinja")
    assert artifact_uri(m) == "templates/qwen3-tito.jinja"
    m.provenance = dataclasses.replace(m.provenance, template_file="/somewhere/else/qwen3-tito.jinja")
    assert artifact_uri(m) == "qwen3-tito.jinja"
    assert artifact_uri(both.models[0]) == "Qwen/Qwen3-0.6B/chat_template.jinja"


def test_sarif_fingerprints_are_stable_and_distinct(both):
    a, b = to_sarif_dict(both), to_sarif_dict(copy.deepcopy(both))
    fa = [r["partialFingerprints"]["titoFinding/v1"] for r in a["runs"][0]["results"]]
    assert fa == [r["partialFingerprints"]["titoFinding/v1"] for r in b["runs"][0]["results"]]
    assert len(set(fa)) > 1


# --- the command line ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", sorted(OUTPUT_FORMATS.names()))
def test_output_writes_the_file_and_only_the_verdict_to_stdout(fmt, tmp_path):
    out = tmp_path / "sub" / f"report.{fmt}"
    out.parent.mkdir()  # a missing directory is refused, not created (tests/cli/test_output_files.py)
    result = CliRunner().invoke(app, ["audit", "qwen3-0.6b", "--format", fmt, "--output", str(out)])
    assert result.exit_code == 1, result.output  # qwen3 fails an error-level check
    quiet = CliRunner().invoke(app, ["audit", "qwen3-0.6b", "-q"])
    assert result.stdout == quiet.stdout  # the verdict line, as -q prints it: the report is in the file
    text = out.read_text(encoding="utf-8")
    assert "\x1b[" not in text  # no colour codes, terminal included
    assert "qwen3-0.6b" in text


def test_json_on_stdout_is_only_json():
    """A real process: nothing but the report may reach stdout (warnings and progress go to stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tito_audit", "audit", "qwen2.5-7b-instruct", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["models"][0]["verdict"] == "safe"


def test_rl_dir_errors_are_one_line(tmp_path):
    r = CliRunner().invoke(app, ["audit", "qwen3-0.6b", "--format", "json", "--rl-dir", str(tmp_path)])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "--rl-dir needs --format html" in r.stderr
    r = CliRunner().invoke(app, ["audit", "qwen3-0.6b", "--format", "html", "--rl-dir", str(tmp_path)])
    assert r.exit_code == 2 and "no metrics.json" in r.stderr and "Traceback" not in r.stderr


def test_audit_html_with_rl_dir(tmp_path):
    from tito_audit import load

    out = tmp_path / "r.html"
    (tmp_path / "rl").mkdir()
    rl = _fake_rl_dir(tmp_path / "rl", load("qwen3-0.6b").provenance.template_sha256)
    r = CliRunner().invoke(app, ["audit", "qwen3-0.6b", "-f", "html", "--rl-dir", str(rl), "-o", str(out)])
    assert r.exit_code == 1 and r.stdout.startswith("qwen3-0.6b  UNSAFE  ")  # the verdict line alone
    assert "data:image/png;base64," in out.read_text()


def test_rl_dir_of_another_models_run_is_refused(tmp_path):
    from tito_audit import load

    (tmp_path / "rl").mkdir()
    rl = _fake_rl_dir(tmp_path / "rl", load("qwen3-0.6b").provenance.template_sha256)
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["audit", "qwen2.5-7b-instruct", "-f", "html", "--rl-dir", str(rl), "-o", str(out)])
    assert r.exit_code == 2 and "not of any audited model's template" in r.stderr and not out.exists()
    assert r.stderr.strip().count("\n") == 0
    (tmp_path / "old").mkdir()
    r = CliRunner().invoke(
        app, ["audit", "qwen3-0.6b", "-f", "html", "--rl-dir", str(_fake_rl_dir(tmp_path / "old")), "-o", str(out)]
    )
    assert r.exit_code == 2 and "does not say which template it ran" in r.stderr


def test_table_command(tmp_path):
    out = tmp_path / "t.md"
    r = CliRunner().invoke(app, ["table", "qwen3-0.6b", "qwen2.5-7b-instruct", "--output", str(out)])
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == f"wrote {out}\n"
    rows = {row[0].split(" @")[0]: row for row in _table_rows(out.read_text())[1:]}
    assert rows["qwen3-0.6b"][2] == "**UNSAFE**" and rows["qwen2.5-7b-instruct"][2] == "safe"


def test_table_command_reports_bad_models_in_one_line(tmp_path):
    r = CliRunner().invoke(app, ["table", "no-such-bundled-model-xyz", "--offline"])
    assert r.exit_code == 2
    assert "**ERROR**[^1]" in r.stdout and "[^1]: **no-such-bundled-model-xyz** could not be audited" in r.stdout
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("error:")] == [
        ln for ln in r.stderr.splitlines() if "no-such-bundled-model-xyz" in ln
    ]
