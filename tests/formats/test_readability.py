"""Reports a person reads: bounded cells that say what differs, marks that survive without colour, lines that
wrap only between fields, on the real shared models."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from tito_audit.formats.terminal import FIRST_DIVERGENT, SUMMARY_LIMIT, model_section, provenance_fields, to_terminal
from tito_audit.report.model_report import AuditReport
from tito_audit.report.quote import QUOTE_LIMIT, quoted

QWEN3, GPT_OSS = "Qwen/Qwen3-0.6B", "openai/gpt-oss-20b"


def test_quoted_is_bounded_and_says_how_long() -> None:
    text = "The user wants the weather, so I call the tool and then summarise it."
    q = quoted(text)
    assert len(q) <= QUOTE_LIMIT + 20 and q.endswith(f"({len(text)} chars)") and "…" in q
    assert q.startswith("'The user wants the weather, so I call") and "I call t…" not in q  # ends at a word
    assert quoted("short") == "'short'"


@pytest.mark.parametrize("spec", [QWEN3, GPT_OSS])
def test_every_summary_is_bounded(report, spec: str) -> None:
    rep = report(spec)
    for c in rep.checks:
        assert len(c.summary) <= SUMMARY_LIMIT, (c.id, c.summary)
    gen = rep.check("generation_prompt")
    assert gen.status == "warn" and "which the same turn lacks once it is history" in gen.summary
    assert re.search(r"history continues with '.*' \(\d+ chars\) there", gen.summary), gen.summary


def test_gpt_oss_final_answer_is_sampled_not_trailing_text(report) -> None:
    """The final answer after a call is the turn the model samples, not text after an earlier turn's stop (the
    template drops the earlier analysis once the answer follows: the turn starts after the tool result)."""
    check = report(GPT_OSS).check("stop_boundary")
    assert check.data["trailing_after_stop"] == [] and "after the stop token" not in check.summary
    assert len(check.summary) < 200


def test_first_divergent_row_is_marked_without_colour(report) -> None:
    rep = report(QWEN3)
    text = to_terminal(AuditReport([rep]))
    assert "\x1b[" not in text
    f = next(f for f in rep.check("tool_append_prefix").findings if f.expected is not None)
    marked = [ln for ln in text.splitlines() if ln.startswith(FIRST_DIVERGENT)]
    assert len(marked) == 1 and re.match(rf"{FIRST_DIVERGENT}\s+{f.index}\s", marked[0]), marked


@pytest.mark.parametrize("width", [60, 80, 100])
def test_provenance_wraps_only_between_fields(report, width: int) -> None:
    rep = report(GPT_OSS)
    buffer = io.StringIO()
    model_section(Console(file=buffer, width=width, color_system=None), rep)
    lines = [ln.strip() for ln in buffer.getvalue().splitlines()[1:4]]
    for field in provenance_fields(rep):
        assert any(field in ln for ln in lines), (field, lines)
