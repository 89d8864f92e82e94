"""reports/compatibility.md is what the code produces for every bundled model and every shared Hub model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import HUB, SHARED_MODELS

from tito_audit.cli.table import cached_models
from tito_audit.formats import compatibility_table
from tito_audit.sources.bundled import bundled_names

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "reports" / "compatibility.md"
REGENERATE = "scripts/make_compatibility_table.sh"


def table_models() -> list[str]:
    """The rows in the order the script writes them: ``--bundled`` then ``--cached``."""
    return bundled_names() + cached_models(HUB)


def test_the_script_covers_every_shared_model():
    assert set(cached_models(HUB)) == set(SHARED_MODELS)
    script = (ROOT / REGENERATE).read_text()
    assert "--bundled --cached" in script and "shared/hf-hub" in script and "HF_HUB_OFFLINE=1" in script


def test_committed_table_is_deterministic_and_complete():
    """Cheap checks on the committed file: one row per model, no paths or timings, a note per ❌."""
    text = COMMITTED.read_text(encoding="utf-8")
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| model")]
    assert [r.split("|")[1].strip().split(" @")[0] for r in rows] == table_models()
    assert not re.search(r"/(work|tmp|home|root|Users)/|seconds|\d+\.\d+ ?s\b", text)
    refs = re.findall(r"❌\[\^(\d+)\]", text)
    assert refs and len(refs) == text.count("❌[^")
    notes = dict(re.findall(r"^\[\^(\d+)\]: (.+)$", text, re.M))
    assert set(refs) <= set(notes)
    assert all("first in" in notes[n] for n in refs)


@pytest.mark.slow
def test_committed_table_matches_a_fresh_audit(report):
    fresh = compatibility_table([report(spec) for spec in table_models()])
    committed = COMMITTED.read_text(encoding="utf-8")
    assert fresh == committed, f"reports/compatibility.md is stale: run {REGENERATE}"
