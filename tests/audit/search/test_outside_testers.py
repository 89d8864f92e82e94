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
        "i_twouser",  # rewrites a call turn in history after two user messages in a row
        "i_idless",  # rewrites a call turn in history whose call has no id
        "i_sysmid",  # rewrites a call turn in history after a system message in the middle
    ],
)
def test_the_search_finds_rewrites_keyed_on_what_agent_traffic_sends(name: str) -> None:
    report = audit_of(TEMPLATES / f"{name}.jinja")
    assert report["verdict"] == "unsafe", (name, report["verdict_reasons"])
    assert report["scenarios"]["search"]["counterexamples"], report["scenarios"]["search"]


def test_a_long_tool_name_cut_in_history_is_found_without_the_search() -> None:
    """``tool_call.name[:(24 if H else 1000)]``, no branch at all: the search found it; now the 24 is read as a
    length the template cuts with, and the wide episode calls tools named with 24 and 25 characters."""
    report = audit_of(TEMPLATES / "s_namecut.jinja", search=0)
    assert report["verdict"] == "unsafe", report["verdict_reasons"]


@pytest.mark.parametrize("name", ["i_len80", "i_reserr", "i_url", "i_idless"])
def test_an_inline_rewrite_is_never_a_clean_safe(name: str) -> None:
    """With the search off, only coverage stands between these and a clean SAFE: the inline condition's untaken arm
    is named."""
    report = audit_of(TEMPLATES / f"{name}.jinja", search=0)
    assert report["verdict"] == "safe", report["verdict_reasons"]
    [gap] = _gaps(report)
    assert gap.startswith("not_probed:template_line:37: H and"), gap
    assert report["exit"] == 3  # a SAFE that names what it did not probe is no clean pass
