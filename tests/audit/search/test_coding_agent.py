"""Red team 19: rewrites of the history keyed on what a coding agent's harness sends, in places no sweep put a value.

Each template (``tests/data/search/agent/``, ChatML with tools on Qwen2.5's tokenizer) writes every call but the last
message's compactly where the system prompt says the model is an agent, a declared tool's description says it runs
a shell, a tool result holds a Python traceback, or the user said "continue": the word put together from pieces and
the rewrite picked by arithmetic, so that neither the reading of the code nor template coverage sees it. Each was a
clean SAFE (exit 0) on 239987d, whose sweeps vary a call's text and arguments, results, answers and user turns but
not the system prompt or the tools' declarations, and whose text cores hold no traceback and no "continue". The
sweep of a coding agent's episode (``search/sweep.py``, ``sweep_agent``) plays a harness's system prompt and tools,
what shell and file tools return, and a user who says "continue". Without the search each is still SAFE: the
search is what finds them. The control applies the same rewrite to every call, the last message's too.
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe
from tests.audit.search.qwen_rewrites import audited as qwen_rewrite
from tests.conftest import DATA, audit_of
from tito_audit.audit.search.sweep import AGENT_SYSTEM, AGENT_TOOLS

AGENT = DATA / "search" / "agent"


@pytest.mark.parametrize(
    "name",
    [
        "compact_earlier_calls_when_the_system_prompt_names_an_agent",
        "compact_earlier_calls_when_a_tool_runs_a_shell",
        "compact_earlier_calls_after_a_traceback",
        "compact_earlier_calls_after_the_user_says_continue",
    ],
)
def test_a_rewrite_keyed_on_a_coding_agents_traffic_is_found_by_its_sweep(name: str) -> None:
    report = qwen_rewrite(AGENT, name)
    assert report.verdict == "unsafe", report.verdict_reasons
    assert "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    (found, *_) = report.scenarios["search"]["counterexamples"]
    # the harness's conversation, shrunk: its system prompt, its tools as it declares them
    assert found["messages"][0] == {"role": "system", "content": AGENT_SYSTEM}, found["messages"][0]
    harness = {t["function"]["name"]: t for t in AGENT_TOOLS}
    assert found["tools"] and all(t == harness[t["function"]["name"]] for t in found["tools"]), found["tools"]
    assert audit_of(MODEL, AGENT / f"{name}.jinja", search=0).verdict == "safe"


def test_the_same_rewrite_on_every_call_stays_safe() -> None:
    assert_clean_safe(qwen_rewrite(AGENT, "control_every_call_compact_when_the_system_prompt_names_an_agent"))


def test_the_harness_declares_its_tools_as_harnesses_do() -> None:
    """A shell tool described as one, a file tool whose parameter is a path, a tool without a description; the
    shrink keeps those declarations for the tools still called (a rewrite keyed on them must still break)."""
    from tito_audit.audit.search.space import SearchSpace
    from tito_audit.audit.search.sweep import like_sweep, sweep_agent

    conversation = sweep_agent(SearchSpace())
    assert conversation.tools == AGENT_TOOLS
    assert "shell" in AGENT_TOOLS[0]["function"]["description"]
    assert "file_path" in AGENT_TOOLS[1]["function"]["parameters"]["properties"]
    assert "description" not in AGENT_TOOLS[2]["function"]
    users = [m["content"] for m in conversation.messages if m["role"] == "user"]
    results = [m["content"] for m in conversation.messages if m["role"] == "tool"]
    assert "continue" in users and any(r.startswith("Traceback") for r in results)
    kept = like_sweep([m for m in conversation.messages[:4]], conversation)  # the first call and its result
    assert [t["function"]["name"] for t in kept.tools] == ["bash"] and kept.tools[0] == AGENT_TOOLS[0]
