"""What the red-team suites of history rewrites of Qwen2.5's template share (``test_values_and_forms.py``,
``test_tool_outputs.py``): the audit of one rewrite as a user runs it, and what a control must show."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import audit_of

MODEL = "qwen2.5-7b-instruct"


def audited(folder: Path, name: str):  # type: ignore[no-untyped-def]
    """The default audit of Qwen2.5 with ``folder/name.jinja`` as its template (once per test session)."""
    return audit_of(MODEL, folder / f"{name}.jinja")


def sampled_call_rewritten(report):  # type: ignore[no-untyped-def]
    """The call of an UNSAFE audit's counterexample that breaks buffer + delta on one tool cycle: the result's
    append re-rendered the sampled call (``rewrites_on_tool_append``), shown on four messages with that one call."""
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    (found, *_) = report.scenarios["search"]["counterexamples"]
    assert found["kind"] == "append" and len(found["messages"]) == 4, found
    (call,) = [c["function"] for m in found["messages"] for c in m.get("tool_calls") or []]
    return call


def assert_clean_safe(report) -> None:  # type: ignore[no-untyped-def]
    """A control (the same change on every turn): SAFE with nothing named, every conversation of the search drawn
    and none breaking."""
    assert report.verdict == "safe" and not report.scenarios.get("not_probed"), report.verdict_reasons
    search = report.scenarios["search"]
    assert search["drawn"] == search["budget"] and search["counterexamples"] == []


def assert_lost(report, reason: str) -> None:  # type: ignore[no-untyped-def]
    """A change made on every turn alike that loses what the model must see (red team 44): no render departs from
    another, so the search's only counterexample is a ``lost`` one, and ``tool_support`` makes the verdict UNSAFE
    with ``reason``."""
    assert report.verdict == "unsafe" and reason in report.verdict_reasons, report.verdict_reasons
    found = report.scenarios["search"]["counterexamples"]
    assert [c["kind"] for c in found] == ["lost"], found
