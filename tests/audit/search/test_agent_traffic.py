"""Round 7 of the red team: history rewrites keyed on what agent traffic sends and the search did not draw, each a
clean SAFE (exit 0) under the default search before its space held them, each confirmed by hand with
apply_chat_template (an earlier call's arguments become ``{}`` once the conversation goes on): an MCP tool name as
coding agents write it (``mcp__github__create_issue``), an empty list or object, a zero, a millisecond timestamp,
Windows line ends in an argument or a tool result, a code argument of many lines, a tool result of only whitespace,
a call written as text in the visible content. Every one is now found by the search (``audit/search/space.py``)."""

from __future__ import annotations

import pytest

from tests.audit.search.test_outside_testers import audit_of
from tests.conftest import DATA

TRAFFIC = DATA / "search" / "traffic"


@pytest.mark.parametrize("name", sorted(p.stem for p in TRAFFIC.glob("*.jinja")))
def test_the_search_finds_a_rewrite_keyed_on_everyday_agent_traffic(name: str) -> None:
    report = audit_of(TRAFFIC / f"{name}.jinja")
    assert report["verdict"] == "unsafe", (name, report["verdict_reasons"])
    assert report["exit"] == 1
