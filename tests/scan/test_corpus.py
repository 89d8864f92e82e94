"""The scan over real templates from the shared corpus: a class for every template, no crash, no hang."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import CORPUS, needs_corpus
from tito_audit.scan import CLASSES, PoolLimits, scan_directory

pytestmark = needs_corpus


def test_sample_of_30_corpus_templates(tmp_path: Path) -> None:
    sample = sorted(CORPUS.glob("*.jinja"))[::26][:30]
    for p in sample:
        shutil.copy(p, tmp_path / p.name)
    s = scan_directory(str(tmp_path), "auto", limits=PoolLimits(workers=2, deadline_s=60))
    assert len(s.results) == 30 and s.crashes == 0
    assert all(r.cls in CLASSES and r.cls != "worker_crash" for r in s.results)
    assert all(r.cls not in ("security", "audit_error") for r in s.results)  # the audit code never fails on them
    verdicts = [r for r in s.results if r.verdict]
    assert len(verdicts) >= 20  # real templates mostly audit to a verdict
    by = {r.name: r for r in s.results}
    for r in by.values():
        if r.cls == "missing_tokens":
            assert r.missing_tokens and r.reason.startswith("vocabulary lacks")


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TITO_SKIP_CORPUS") == "1", reason="TITO_SKIP_CORPUS=1")
def test_full_corpus_every_template_classified() -> None:
    s = scan_directory(str(CORPUS), "auto", limits=PoolLimits(workers=2, deadline_s=60))
    assert len(s.results) == 786
    assert s.crashes == 0
    assert all(r.cls in CLASSES for r in s.results)
    assert s.counts.get("audit_error", 0) == 0 and s.counts.get("worker_crash", 0) == 0
    assert sum(s.counts.values()) == 786
    assert s.seconds < 600
