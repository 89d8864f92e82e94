"""Issue 40: `rl` plays the conversations the counterexample search finds, so its verdict is never "identical"
where the search found one. The template (tests/data/search/mcp_names_hidden.jinja, on Qwen2.5's tokenizer) writes
dotted tool names with '_' in the turns before the last user message; on 507ac91 `rl` said identical."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import DATA, needs_hub
from tests.rl.qwen_template import qwen_with_template
from tito_audit.audit.context import SEARCH_BUDGET
from tito_audit.rl import RLConfig, run_rl

QUICK = dict(steps=1, groups=1, group_size=3, scenarios=("single_call/plain", "two_calls/plain", "reasoning/plain"))


def _model(tmp_path: Path) -> str:
    """Qwen2.5's tokenizer with the template of tests/data/search/mcp_names_hidden.jinja."""
    return qwen_with_template(tmp_path, DATA / "search" / "mcp_names_hidden.jinja")


@needs_hub
def test_the_searched_counterexample_is_a_token_fact_of_the_run(tmp_path: Path) -> None:
    result = run_rl(RLConfig(model=_model(tmp_path), **QUICK))
    search = result.setup["coverage"]["search"]
    assert [c["scenario"] for c in search["counterexamples"]] == ["search/1"]
    facts = result.setup["token_facts"]["by_scenario"]["search/1"]
    assert facts["mismatched_trained"] > 0
    assert result.summary["verdict"] == "corrupted"


def test_rl_searches_as_audit_does_by_default() -> None:
    assert RLConfig(model="x").search == SEARCH_BUDGET and RLConfig(model="x").search_seed == 0
