"""reports/compatibility.md is what the code produces for every bundled model and every shared Hub model."""

from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import HUB, ROOT, SHARED_MODELS
from tito_audit.cli.table import cached_models
from tito_audit.formats.compatibility import compatibility_table
from tito_audit.formats.labels import LIBRARY_ORDER
from tito_audit.sources.bundled import bundled_names

sys.path.insert(0, str(ROOT / "scripts"))
import doc_examples

COMMITTED = ROOT / "reports" / "compatibility.md"
REGENERATE = "scripts/make_compatibility_table.sh"


def versions_masked(table: str) -> str:
    """The table with each library's release number masked, as the README's examples are compared
    (``scripts/doc_examples.py``): CI installs the newest releases, and the committed file says which releases
    produced it; a row, a verdict or a compat fallback that changes with a release still differs."""
    return doc_examples.masked(table)


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
    names = [re.findall(r"^([\w./-]+) @\w+(?: \(bundled: (.*)\))?$", r.split("|")[1].strip())[0] for r in rows]
    named = [n for hub, bundled in names for n in [hub, *re.findall(r"`([^`]+)`", bundled)]]
    assert sorted(named) == sorted(table_models())  # every model, each in exactly one row
    assert len({hub.lower() for hub, _ in names}) == len(rows)  # no model twice
    aliases = [a for _, bundled in names for a in re.findall(r"`([^`]+)`", bundled)]
    assert sorted(aliases) == sorted(bundled_names())  # each bundled copy shares its Hub model's row
    assert not re.search(r"/(work|tmp|home|root|Users)/|seconds|\d+\.\d+ ?s\b", text)
    refs = re.findall(r"\*\*FAIL\*\*\[\^(\d+)\]", text)
    assert refs and len(refs) == text.count("**FAIL**[^")
    notes = dict(re.findall(r"^\[\^(\d+)\]: (.+)$", text, re.M))
    assert set(refs) <= set(notes)
    assert all("first in" in notes[n] for n in refs)


@pytest.mark.slow
def test_committed_table_matches_a_fresh_audit(report):
    fresh = compatibility_table([report(spec) for spec in table_models()])
    committed = COMMITTED.read_text(encoding="utf-8")
    assert versions_masked(fresh) == versions_masked(committed), f"reports/compatibility.md is stale: run {REGENERATE}"


def test_only_release_numbers_are_masked():
    """The mask of the test above hides a newer transformers, nothing else: not a verdict, not a fallback."""
    committed = COMMITTED.read_text(encoding="utf-8")
    stamp = next(ln for ln in committed.splitlines() if ln.startswith("Audited with"))
    newer = re.sub(r"transformers \d+\.\d+\.\d+", "transformers 9.1.0rc2", committed)
    assert newer != committed and versions_masked(newer) == versions_masked(committed)
    assert versions_masked(stamp) == "Audited with " + " · ".join(f"{name} <v>" for name in LIBRARY_ORDER)
    for change in (("**UNSAFE**", "SAFE"), (stamp, stamp[:-1] + " · compat fallbacks: fast_inputs.")):
        assert versions_masked(committed.replace(*change)) != versions_masked(committed)


def test_table_does_not_depend_on_how_wide_characters_are_measured(report, monkeypatch):
    """tabulate pads by display width only when the optional wcwidth is installed: the table must come out the
    same either way (it failed on a fresh venv without wcwidth when cells were emoji)."""
    import unicodedata
    from types import SimpleNamespace

    import tabulate

    def display_width(text: str) -> int:  # what wcwidth measures: East Asian wide/full-width characters are 2
        return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)

    reports = [report(spec) for spec in ("qwen3-0.6b", "Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-7B-Instruct")]
    monkeypatch.setattr(tabulate, "wcwidth", None)
    monkeypatch.setattr(tabulate, "WIDE_CHARS_MODE", False)
    without = compatibility_table(reports)
    emoji_rows = tabulate.tabulate([["✅"], ["ab"]], tablefmt="pipe")
    wide = SimpleNamespace(wcswidth=display_width, wcwidth=lambda ch: display_width(ch))
    monkeypatch.setattr(tabulate, "wcwidth", wide)
    monkeypatch.setattr(tabulate, "WIDE_CHARS_MODE", True)
    assert tabulate.tabulate([["✅"], ["ab"]], tablefmt="pipe") != emoji_rows  # emoji cells would pad otherwise
    assert compatibility_table(reports) == without


def test_a_property_of_every_model_is_said_once(report):
    models = ("Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-7B-Instruct", "openai/gpt-oss-20b", "allenai/OLMo-2-1124-7B-Instruct")
    reports = [report(spec) for spec in models]
    text = compatibility_table(reports)
    header = next(ln for ln in text.splitlines() if ln.startswith("| model"))
    for cid in ("roundtrip", "special_token_injection", "loss_mask"):  # warn for each of the four
        assert {r.check(cid).status for r in reports} == {"warn"}
        assert f" {cid} " not in header and f"- `{cid}`: `warn` for all 4 models." in text
    assert len({r.check("tool_support").status for r in reports}) > 1  # OLMo-2 drops tool traffic, the others not
    assert " tool_support " in header and " tool_append_prefix " in header  # these tell the models apart
