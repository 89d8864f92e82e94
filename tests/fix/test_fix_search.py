"""Issue 40: `fix` reads the facts the counterexample search found. It audits the patched template with the same
search, and replays the original's counterexamples on it (``AuditOptions.counterexamples``): a patch the catalogue
alone would prove is not offered where a searched conversation still breaks it. On 507ac91 the template below got
"UNSAFE -> TITO-REQUIRED patch changes deployed prompts", its names rewrite unseen. Its lower-casing is written as
``replace('W', 'w')``, which no reading of the code takes for a fold: written ``|lower``, the derived
``names/plain`` finds it without the search (the second test)."""

from __future__ import annotations

from tests.conftest import DATA
from tito_audit import load
from tito_audit.audit.context import AuditOptions
from tito_audit.fix import propose_fix


def test_a_patch_the_search_still_breaks_is_not_offered() -> None:
    model = load("qwen3-0.6b", chat_template_file=str(DATA / "search" / "qwen3_name_case_hidden.jinja"))
    result = propose_fix(model, AuditOptions(scenarios="quick"))
    # the original is unsafe on the catalogue already (its empty think block): the patched one is searched
    assert result.before.verdict == "unsafe"
    assert result.status == "no_safe_patch", (result.status, result.message)
    assert "reasoning_history" in result.message and "tool_append_prefix still fail" in result.message
    # without the search, the catalogue alone proves the patch (what 507ac91 offered)
    blind = propose_fix(model, AuditOptions(scenarios="quick", search=0))
    assert blind.status == "changes_inference" and blind.after is not None and blind.after.verdict == "tito-required"


def test_a_names_rewrite_the_derived_scenarios_find_blocks_the_patch_without_the_search() -> None:
    model = load("qwen3-0.6b", chat_template_file=str(DATA / "search" / "qwen3_name_case.jinja"))
    blind = propose_fix(model, AuditOptions(scenarios="quick", search=0))
    assert blind.status == "no_safe_patch", (blind.status, blind.message)
    assert "tool_append_prefix still fail" in blind.message
