"""Red team 60: history rewrites of Qwen2.5's template keyed on an argument value that a later call repeats.

A coding agent reads a file again after editing it, runs the tests again after a fix, fetches a page again; a
harness that manages its context shortens the older output to a pointer to the newer one. Each template
(``tests/data/search/repeats/``) does that to earlier tool results only: it collects every call's ``file_path``
(``command``, ``url``, ``doc_id``) in a first loop and writes a note in place of a result whose value a later call
repeats, chosen by ``selectattr``/``first``/``default`` (no ``{% if %}`` arm for template coverage to name). On
81e9e8e each was a clean SAFE (exit 0, nothing named), also with ``--search 200``: no conversation repeated such a
value in a later turn. The sweep of repeated values (``search.repeats``) calls tools with the keys agents' tools
carry and those the template reads by name, and repeats them: each is found, and ``doc_id``, which no agent's tool
list names, only because the template reads it (``rendering.read_keys``).

The control writes every result's ``file_path`` next to it, on every turn alike: a clean SAFE. A template that
refuses every call carrying a ``file_path`` names the sweeps it refused.
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import assert_clean_safe, audited
from tests.conftest import DATA

REPEATS = DATA / "search" / "repeats"


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("file_read_again_in_history", "file_path"),
        ("command_run_again_in_history", "command"),
        ("url_fetched_again_in_history", "url"),
        ("document_fetched_again_in_history", "doc_id"),
    ],
)
def test_a_rewrite_keyed_on_a_value_called_again_is_found(name: str, key: str) -> None:
    r = audited(REPEATS, name)
    assert r.verdict == "tito-required" and "tito-required:naive_rerender" in r.verdict_reasons, r.verdict_reasons
    assert not r.scenarios.get("not_probed"), r.scenarios.get("not_probed")
    (found, *_) = r.scenarios["search"]["counterexamples"]
    assert "searched:" in found["conversation"]
    values = [c["function"]["arguments"].get(key) for m in found["messages"] for c in m.get("tool_calls") or []]
    assert len(values) >= 2 and len(set(values)) == 1 and values[0], found["messages"]  # shrunk to the repeat


def test_a_value_shown_next_to_every_result_is_a_clean_safe() -> None:
    assert_clean_safe(audited(REPEATS, "file_path_shown_always"))


def test_a_template_that_refuses_the_sweeps_calls_names_them_never_a_clean_safe() -> None:
    """A template that raises on any call carrying a ``file_path``: the coding agent's sweep, the sweep of repeated
    values and the sweep of a large context each lose the blocks it refuses. What they held is compared nowhere, so
    the answer names each (SAFE for what was compared, exit 3), never a clean SAFE."""
    r = audited(REPEATS, "file_path_refused")
    not_probed = r.scenarios.get("not_probed") or []
    assert r.verdict == "safe"
    assert {"search:refused:repeats", "search:refused:context"} <= set(not_probed), not_probed
