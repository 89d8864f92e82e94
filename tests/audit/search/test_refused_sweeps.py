"""A sweep the template refuses is played as the part of it the template accepts, or named; and a rewrite keyed on
two values at once meets both in one sweep.

On de5514b a sweep the template refused was dropped whole, silently: gpt-oss's template refuses a tool declared
without a description, so none of the coding agent's values (a traceback, "continue", a shell tool) was tried on it,
and Mistral-Nemo's refused three sweeps of six. Each template here (``tests/data/search/refused/``, ChatML with tools
on Qwen2.5's tokenizer) was a clean SAFE (exit 0) there. And a rewrite keyed on a dotted tool name *and* a numeric
result (red team 19's t10, ``tests/data/search/pairs/``) was a clean SAFE too: no sweep held both.
"""

from __future__ import annotations

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe
from tests.conftest import DATA, audit_of
from tito_audit.audit.search.accepted import accepted, blocks
from tito_audit.scenarios.searched import Conversation

REFUSED = DATA / "search" / "refused"
PAIRS = DATA / "search" / "pairs"


def test_a_sweep_refused_for_one_tool_is_played_without_it() -> None:
    """The template refuses ``todo_write``, declared without a description: the coding agent's episode is played
    without that tool's cycle, and its traceback breaks the history."""
    report = audit_of(MODEL, REFUSED / "traceback_rewrite_refusing_undescribed_tools.jinja")
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    search = report.scenarios["search"]
    assert search["refused"] == {"agent": 1}, search
    (found, *_) = search["counterexamples"]
    assert any(m["content"].startswith("Traceback") for m in found["messages"] if m["role"] == "tool"), found
    assert all("description" in t["function"] for t in found["tools"]), found["tools"]
    without = audit_of(MODEL, REFUSED / "traceback_rewrite_refusing_undescribed_tools.jinja", search=0)
    assert without.verdict == "safe", without.verdict_reasons


def test_the_refusal_alone_is_no_gap() -> None:
    """Control: the same refusal, no rewrite. The block it refuses is counted in the search's summary, and is no
    gap: a loop cannot send that tool to this template."""
    report = audit_of(MODEL, REFUSED / "control_refusing_undescribed_tools.jinja")
    assert_clean_safe(report)
    assert report.scenarios["search"]["refused"] == {"agent": 1}


def test_a_sweep_the_template_accepts_no_part_of_is_named() -> None:
    """The template refuses every conversation that calls the model autonomous, as the coding agent's system
    prompt does (also once moved into the user turn): no part of that sweep is played, its traceback is tried
    nowhere, and the SAFE says so (``search:refused:agent``: not a clean SAFE)."""
    report = audit_of(MODEL, REFUSED / "traceback_rewrite_refusing_an_agent_persona.jinja")
    assert report.verdict == "safe"
    assert "search:refused:agent" in report.scenarios["not_probed"], report.scenarios.get("not_probed")


def test_a_rewrite_keyed_on_a_dotted_name_and_a_numeric_result_is_found() -> None:
    """The sweep of texts names its calls with every name shape and returns every text core: a dotted name and a
    number returned are in one episode."""
    name = "compact_earlier_calls_for_a_dotted_name_and_a_numeric_result"
    report = audit_of(MODEL, PAIRS / f"{name}.jinja")
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    (found, *_) = report.scenarios["search"]["counterexamples"]
    names = [c["function"]["name"] for m in found["messages"] for c in m.get("tool_calls") or []]
    results = [m["content"] for m in found["messages"] if m["role"] == "tool"]
    assert any("." in n for n in names) and any(r.lstrip("-").replace(".", "", 1).isdigit() for r in results)
    assert audit_of(MODEL, PAIRS / f"{name}.jinja", search=0).verdict == "safe"


def _call(name: str) -> dict:  # type: ignore[type-arg]
    return {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": name}}]}


def test_accepted_keeps_each_block_the_template_renders_in_order() -> None:
    user = {"role": "user", "content": "go"}
    result = {"role": "tool", "content": "ok"}
    answer = {"role": "assistant", "content": "done"}
    messages = (user, _call("a"), result, _call("bad"), result, _call("b"), result, answer, user)
    opening, rest = blocks(messages)
    assert opening == [user] and [len(b) for b in rest] == [2, 2, 2, 1, 1]

    def like(ms: list) -> Conversation:  # type: ignore[type-arg]
        return Conversation(tuple(ms), ())

    def renders(c: Conversation) -> bool:
        return not any(call["function"]["name"] == "bad" for m in c.messages for call in m.get("tool_calls") or [])

    part, refused = accepted(Conversation(messages, ()), like, renders)
    assert refused == 1
    # the refused cycle is gone, the rest kept in order, and the episode ends where the model last answered
    assert part is not None and part.messages == (user, _call("a"), result, _call("b"), result, answer)
    nothing, refused = accepted(Conversation(messages, ()), like, lambda c: len(c.messages) < 2)
    assert nothing is None and refused == 5
