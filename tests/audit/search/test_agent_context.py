"""Red team 62: history rewrites of Qwen2.5's template keyed on what an agent's context holds as it grows.

Each template (``tests/data/search/context/``) writes its rewrite without an ``{% if %}`` (a 0/1 flag times a slice
bound), and builds what it compares with at run time, so that neither template coverage nor a literal of its code
could name it:

- older tool output cleared once the conversation's text passes a budget (``'%d000'|format(20)|int`` characters),
  as harnesses that compact their context do;
- a failed tool call's result shortened once a later turn calls again, keyed on the OpenAI Agents SDK's default
  error text ("... Please try again. Error: ..."), the model's retry;
- an earlier answer cut to its first line once a later user turn quotes that line in Markdown (``> ...``).

On 1cb1539 each was a clean SAFE (exit 0, nothing named), also with ``--search 100 --search-seed 1``: no
conversation of the search grew past about twenty thousand characters, returned that error text or quoted an
answer. The sweep of a large context (``context.sweep_context``: files of 4,000 and 60,000 characters), the sweep of
what tools print (the SDK's error, then a retry) and the sweep of answers (a quoted line) send them now.
"""

from __future__ import annotations

import pytest

from tests.audit.search.qwen_rewrites import audited
from tests.conftest import DATA

CONTEXT = DATA / "search" / "context"


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        # the budget passes as a result is appended, which rewrites the results before it: buffer + delta breaks too
        ("older_output_cleared_past_a_budget", "unsafe"),
        ("failed_attempt_shortened_after_retry", "tito-required"),
        ("answer_cut_to_quoted_line", "tito-required"),
    ],
)
def test_a_rewrite_keyed_on_a_growing_context_is_found(name: str, verdict: str) -> None:
    r = audited(CONTEXT, name)
    assert r.verdict == verdict, r.verdict_reasons
    assert not r.scenarios.get("not_probed"), r.scenarios.get("not_probed")
    (found, *_) = r.scenarios["search"]["counterexamples"]
    assert "searched:" in found["conversation"]
