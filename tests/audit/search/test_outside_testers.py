"""Templates an outside tester wrote to get a wrong SAFE (exit 0) after the search and coverage landed: stock
Qwen2.5 with one history-only rewrite, written inline (``{{ A if TEST else B }}``, a slice bound) or keyed on what
agent traffic sends and the search did not draw (a URL next to a call, long tool names, call ids absent, two user
messages in a row, an error result). Each was confirmed by hand with apply_chat_template: buffer + delta breaks.
Every one must now be either found (not SAFE) or named as not probed (SAFE with ``not_probed:template_line``, exit
3): never a clean SAFE."""

from __future__ import annotations

import json

import pytest

from tests.conftest import DATA, tito

TEMPLATES = DATA / "search" / "inline"
TOKENIZER = "qwen2.5-7b-instruct"
_AUDITS: dict[tuple[str, int], dict] = {}  # type: ignore[type-arg]


def audit_of(template, search: int = 40):  # type: ignore[no-untyped-def]
    """``tito-audit audit TOKENIZER --chat-template FILE --format json``'s model, as a user runs it (once per
    session)."""
    key = (str(template), search)
    if key not in _AUDITS:
        done = tito("audit", TOKENIZER, "--chat-template", template, "--search", str(search), "-f", "json")
        assert done.returncode in (0, 1, 3), done.stderr
        _AUDITS[key] = {**json.loads(done.stdout)["models"][0], "exit": done.returncode}
    return _AUDITS[key]


def _gaps(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [r for r in report["verdict_reasons"] if r.startswith("not_probed:template_line")]


@pytest.mark.parametrize(
    "name",
    [
        "i_url",  # '"parameters"' for '"arguments"' in history when the text next to a call holds a URL
        "s_namecut",  # no branch at all: tool_call.name[:(24 if H else 1000)] cuts long names in history
        "i_twouser",  # rewrites a call turn in history after two user messages in a row
        "i_idless",  # rewrites a call turn in history whose call has no id
    ],
)
def test_the_search_finds_rewrites_keyed_on_what_agent_traffic_sends(name: str) -> None:
    report = audit_of(TEMPLATES / f"{name}.jinja")
    assert report["verdict"] == "unsafe", (name, report["verdict_reasons"])
    assert report["scenarios"]["search"]["counterexamples"], report["scenarios"]["search"]


@pytest.mark.parametrize("name", ["i_len80", "i_reserr", "s_emojidrop", "i_url", "i_idless"])
def test_an_inline_rewrite_is_never_a_clean_safe(name: str) -> None:
    """With the search off, only coverage stands between these and a clean SAFE: the inline condition's untaken arm
    is named."""
    report = audit_of(TEMPLATES / f"{name}.jinja", search=0)
    if name == "s_emojidrop":  # both arms of its condition run (H is true and false); only the search tells
        assert report["verdict"] == "safe" and not _gaps(report)
        return
    assert report["verdict"] == "safe", report["verdict_reasons"]
    [gap] = _gaps(report)
    assert gap.startswith("not_probed:template_line:37: H and"), gap
    assert report["exit"] == 3  # a SAFE that names what it did not probe is no clean pass


def test_an_emoji_next_to_a_call_is_drawn_by_a_deeper_search() -> None:
    """s_emojidrop drops characters above U+2600 from history content, with no arm left untaken: only the search
    can tell, and its default 40 conversations do not draw an emoji next to a call (SAFE, exit 0: the limit of a
    budget, docs/checks.md); --search 100 does."""
    assert audit_of(TEMPLATES / "s_emojidrop.jinja")["verdict"] == "safe"
    report = audit_of(TEMPLATES / "s_emojidrop.jinja", search=100)
    assert report["verdict"] == "unsafe", report["verdict_reasons"]
