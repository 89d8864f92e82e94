"""The real outputs shown in the README and the docs are the outputs of today's code: each example block is run
again (``scripts/doc_examples.py --check``) and compared with library versions and durations masked."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import doc_examples

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_shows_real_output_of_the_set_up_command() -> None:
    """The README's first command carries an example block, so the staleness check below has something to run."""
    specs = [m["spec"] for m in doc_examples.MARKER.finditer((ROOT / "README.md").read_text())]
    assert "tito-audit audit --bundled --quiet" in specs
    assert len(specs) >= 4


def test_a_stale_block_is_named(tmp_path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- example: tito-audit --version -->\n```\nnot what it prints\n```\n")
    assert doc_examples.process(page, check=True) == ["page.md: tito-audit --version"]
    doc_examples.process(page, check=False)
    assert doc_examples.process(page, check=True) == []
    assert "not what it prints" not in page.read_text()


def test_versions_and_durations_are_masked_nothing_else() -> None:
    a = "tito-audit 0.1.0 · transformers 5.24.0 · 20 templates · 9.8s\nqwen3  UNSAFE"
    b = "tito-audit 0.1.0 · transformers 5.30.1 · 20 templates · 12.1s\nqwen3  UNSAFE"
    assert doc_examples.masked(a) == doc_examples.masked(b)
    assert doc_examples.masked(a) != doc_examples.masked(a.replace("UNSAFE", "SAFE"))


@pytest.mark.slow
def test_every_example_block_is_current() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "doc_examples.py"), "--check", *map(str, PAGES)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
