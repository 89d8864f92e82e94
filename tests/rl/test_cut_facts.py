"""`rl` counts the episodes cut after appended messages among its token facts, as `audit`'s naive_rerender judges
them (``audit.episode_cuts``): no "identical" where a trainer's re-render of an episode stopped at its turn limit
rewrites the history. The template (tests/data/templates/cuts/compact_calls_when_cut.jinja, on Qwen2.5's tokenizer)
writes its calls compactly when the episode ends on results without a generation prompt; on 48827d0 `rl` said
identical. Its control (closing_line_when_cut.jinja) changes only what follows the results."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import DATA, needs_hub
from tests.rl.qwen_template import qwen_with_template
from tito_audit.rl import RLConfig, run_rl

QUICK = dict(steps=1, groups=1, group_size=3, search=0, scenarios=("single_call/plain", "two_calls/plain"))


def _model(tmp_path: Path, template: str) -> str:
    return qwen_with_template(tmp_path, DATA / "templates" / "cuts" / template)


@needs_hub
def test_a_cut_whose_rerender_rewrites_the_history_is_a_token_fact(tmp_path: Path) -> None:
    result = run_rl(RLConfig(model=_model(tmp_path, "compact_calls_when_cut.jinja"), **QUICK))
    rows = result.setup["token_facts"]["by_scenario"]
    cut_rows = {name: row for name, row in rows.items() if " cut after message " in name}
    assert cut_rows and all(row["mismatched_trained"] > 0 for row in cut_rows.values())
    # the full episodes end on an answer: their re-render is exact
    assert all(row["sequences_affected"] == 0 for name, row in rows.items() if name not in cut_rows)
    assert result.summary["verdict"] == "corrupted"
    stopped = result.setup["coverage"]["stopped_episodes"]
    assert stopped == len(cut_rows)
    assert any(f"and {stopped} stopped at messages the loop appended" in r for r in result.summary["reasons"])


@needs_hub
def test_a_cut_whose_history_is_kept_adds_no_fact(tmp_path: Path) -> None:
    result = run_rl(RLConfig(model=_model(tmp_path, "closing_line_when_cut.jinja"), **QUICK))
    assert not [name for name in result.setup["token_facts"]["by_scenario"] if " cut after message " in name]
    assert "stopped_episodes" not in result.setup["coverage"]
    assert result.summary["verdict"] == "identical"
