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
    with that tool's cycle in its plainest form (the catalogue's tool, declared with a description), and its
    traceback breaks the history."""
    report = audit_of(MODEL, REFUSED / "traceback_rewrite_refusing_undescribed_tools.jinja")
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    search = report.scenarios["search"]
    assert search["refused"] == {"agent": {"reshaped": 1, "dropped": 0}}, search
    (found, *_) = search["counterexamples"]
    assert any(m["content"].startswith("Traceback") for m in found["messages"] if m["role"] == "tool"), found
    assert all("description" in t["function"] for t in found["tools"]), found["tools"]
    without = audit_of(MODEL, REFUSED / "traceback_rewrite_refusing_undescribed_tools.jinja", search=0)
    assert without.verdict == "safe", without.verdict_reasons


def test_blocks_refused_for_their_call_ids_are_played_with_ids_the_template_accepts() -> None:
    """The template refuses a call without an id (as Mistral's does): half the sweep of texts' calls have none, so
    the whole sweep was refused, and with it the ISO timestamp it returns (a SAFE on de5514b, naming only the arms it
    never took). Those blocks are played in their plainest form, their results kept."""
    report = audit_of(MODEL, REFUSED / "timestamp_rewrite_refusing_calls_without_ids.jinja")
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    refused = report.scenarios["search"]["refused"]["texts"]
    assert refused["reshaped"] > 0 and refused["dropped"] == 0, refused


def test_the_refusal_alone_is_no_gap() -> None:
    """Control: the same refusal, no rewrite. The block it refuses is played in its plainest form, counted in the
    search's summary, and is no gap: what it holds was tried. (The template concatenates content, so it refuses the
    sweep of forms' five blocks of content parts too: dropped, and no gap either, their texts were played.)"""
    report = audit_of(MODEL, REFUSED / "control_refusing_undescribed_tools.jinja")
    assert_clean_safe(report)
    refused = report.scenarios["search"]["refused"]
    assert refused["agent"] == {"reshaped": 1, "dropped": 0} and refused["forms"]["dropped"] > 0, refused


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


def _call(name: str, ident: str = "") -> dict:  # type: ignore[type-arg]
    call = {"type": "function", "function": {"name": name, "arguments": {}}, **({"id": ident} if ident else {})}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _like(ms: list) -> Conversation:  # type: ignore[type-arg]
    return Conversation(tuple(ms), ())


def test_accepted_keeps_each_block_the_template_renders_in_order() -> None:
    user = {"role": "user", "content": "go"}
    answer = {"role": "assistant", "content": "done"}
    messages = (user, _call("a"), {"role": "tool", "content": "ok"}, _call("x.y", "id_1"))
    messages += ({"role": "tool", "tool_call_id": "id_1", "name": "x.y", "content": "secret"},)
    messages += (_call("b"), {"role": "tool", "content": "ok"}, answer, user)
    opening, rest = blocks(messages)
    assert opening == [user] and [len(b) for b in rest] == [2, 2, 2, 1, 1]

    def no_dots(c: Conversation) -> bool:
        return not any("." in call["function"]["name"] for m in c.messages for call in m.get("tool_calls") or [])

    part, refused, reshaped = accepted(Conversation(messages, ()), _like, no_dots)
    assert refused == [] and reshaped == 1 and part is not None
    # the refused call is kept in its plainest form: the catalogue's name, an id of nine letters and digits, its
    # result answering it; what it carried (its result) kept; the episode ends where the model last answered
    (plain,) = [m for m in part.messages if m.get("tool_calls") and m["tool_calls"][0].get("id")]
    (result,) = [m for m in part.messages if m.get("content") == "secret"]
    call = plain["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and len(call["id"]) == 9 and call["id"].isalnum()
    assert result["tool_call_id"] == call["id"] and result["name"] == "get_weather"
    assert part.messages[-1] == answer and len(part.messages) == len(messages) - 1

    def no_secret(c: Conversation) -> bool:
        return all(m.get("content") != "secret" for m in c.messages)

    part, refused, reshaped = accepted(Conversation(messages, ()), _like, no_secret)
    assert [b[1]["content"] for b in refused] == ["secret"] and reshaped == 0
    assert part is not None and "secret" not in [m.get("content") for m in part.messages]
    nothing, refused, _ = accepted(Conversation(messages, ()), _like, lambda c: len(c.messages) < 2)
    assert nothing is None and len(refused) == 5


def test_calls_split_over_assistant_messages_stay_one_block_with_their_results() -> None:
    """Two calls written as two assistant messages, then both results: dropping one of them alone would leave a
    result without its call."""
    user = {"role": "user", "content": "go"}
    results = [{"role": "tool", "tool_call_id": i, "content": "ok"} for i in ("c1", "c2")]
    _, rest = blocks((user, _call("a", "c1"), _call("b", "c2"), *results, {"role": "assistant", "content": "done"}))
    assert [len(b) for b in rest] == [4, 1]
