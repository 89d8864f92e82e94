"""Two values of one message together: every name shape with every text core, screened by text (``search/pairs.py``).

The sweeps and the draws hold each value, not each pair of values in one message. A rewrite of an earlier result
keyed on its tool's name *and* its content (a dotted name and digits alone), or of an earlier call keyed on its name
and an argument (a capital letter and an email address), was a clean SAFE (exit 0) on 0f039cf: no conversation
held both in one message; on a template TITO-REQUIRED for another rewrite, the second was TITO-REQUIRED there
(buffer + delta called exact). The templates (``tests/data/search/pairs/``, ChatML with tools on Qwen2.5's tokenizer)
choose by a lookup (``{True: A, False: B}[...]``), which template coverage had no arm for either (it names the
untaken one now: ``tests/rendering/test_coverage_lookups.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe
from tests.conftest import DATA, audit_of
from tito_audit.audit.search.space import NAME_SHAPES, TEXTS

PAIRS = DATA / "search" / "pairs"


def _messages(report, kind: str) -> list[dict]:  # type: ignore[no-untyped-def,type-arg]
    (found, *_) = report.scenarios["search"]["counterexamples"]
    assert found["kind"] == kind, found
    return found["messages"]


def _lookup_named(report) -> bool:  # type: ignore[no-untyped-def]
    """Without the search, the SAFE names the lookup's arm no catalogue conversation took (template coverage counts
    a lookup's two values as arms): a SAFE, but not a clean one."""
    return any(r.startswith("template_line:") and "hist and" in r for r in report.scenarios.get("not_probed", []))


def test_a_result_rewritten_for_its_dotted_name_and_digits_together_is_found() -> None:
    """The result is written ``value=02134`` once it is history: the re-render breaks (buffer + delta does not, the
    buffer never sees the rewrite), so TITO-REQUIRED, and the counterexample is one tool cycle."""
    report = audit_of(MODEL, PAIRS / "dotted_name_numeric_result_in_history.jinja")
    assert report.verdict == "tito-required", report.verdict_reasons
    messages = _messages(report, "rerender")
    results = [m for m in messages if m["role"] == "tool"]
    assert len(messages) == 4 and len(results) == 1, messages
    assert "." in results[0]["name"] and results[0]["content"].isdigit(), results
    assert report.scenarios["search"]["pairs"]["candidates"] == 1
    without = audit_of(MODEL, PAIRS / "dotted_name_numeric_result_in_history.jinja", search=0)
    assert without.verdict == "safe" and _lookup_named(without), without.verdict_reasons


def test_a_call_rewritten_for_a_capital_in_its_name_and_an_email_together_is_found() -> None:
    """The call's arguments are written compactly once a result follows it: the append of the result re-renders
    the sampled call, so UNSAFE, and the counterexample holds the pair in one call."""
    report = audit_of(MODEL, PAIRS / "camel_name_email_argument_in_history.jinja")
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    calls = [c["function"] for m in _messages(report, "append") for c in m.get("tool_calls") or []]
    assert len(calls) == 1 and calls[0]["name"] != calls[0]["name"].lower(), calls
    assert any("@" in str(v) for v in calls[0]["arguments"].values()), calls
    without = audit_of(MODEL, PAIRS / "camel_name_email_argument_in_history.jinja", search=0)
    assert without.verdict == "safe" and _lookup_named(without), without.verdict_reasons


def test_on_a_tito_required_template_the_pair_that_breaks_buffer_and_delta_is_found() -> None:
    """The same call rewrite on a template that also trims earlier answers (TITO-REQUIRED by the scenarios): the
    search looks for buffer + delta breaks and lost values only, and the screen compares the sampled call with the
    prompt after its result's append. TITO-REQUIRED on 532d25a, where the screen ran for SAFE verdicts only: buffer +
    delta was called exact."""
    name = "camel_name_email_argument_on_a_trimming_template.jinja"
    assert audit_of(MODEL, PAIRS / name, search=0).verdict == "tito-required"
    report = audit_of(MODEL, PAIRS / name)
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    assert report.scenarios["search"]["looked_for"] == ["append", "lost"]  # what makes the verdict unsafe
    calls = [c["function"] for m in _messages(report, "append") for c in m.get("tool_calls") or []]
    assert any("@" in str(v) for v in calls[0]["arguments"].values()), calls


# Red team 20's rewrites keyed on a value and another field of the same cycle (each a clean SAFE at e03860e): the
# screen meets each other form of a cycle's fields (a call id's shape, a result without a name, a call without
# arguments) with every text core and every name shape
OTHER_FIELDS = {
    "json_result_for_a_toolu_id_in_history": "rerender",  # an Anthropic id and a JSON object returned
    "digits_result_for_a_kimi_id_in_history": "rerender",  # a Kimi id (``functions.NAME:0``) and digits returned
    "unnamed_json_result_in_history": "rerender",  # a result answered by its id alone, holding a JSON object
    "dashed_name_without_arguments_in_history": "append",  # a dashed name called without arguments
    "slash_name_without_arguments_in_history": "append",  # a name namespaced by "/" called without arguments
    # two other fields together, each picked by arithmetic on its tests (no arm for template coverage): an Anthropic
    # id on a result without its name (Claude's format converted), on a call without arguments (red team 21)
    "unnamed_result_for_a_toolu_id_in_history": "rerender",
    "toolu_call_without_arguments_in_history": "append",
    # a result's three fields at once, counted by arithmetic (a Kimi id, no name, a JSON object), and a call given two
    # keys together (a file tool's ``path`` and ``content``): clean SAFEs on f65df6a, whose screen crossed two fields
    # with one core each and gave each call one key (red team 21's last eleven, of these two kinds)
    "unnamed_json_result_for_a_kimi_id_in_history": "rerender",
    "path_and_content_arguments_in_history": "append",
}


@pytest.mark.parametrize("name", sorted(OTHER_FIELDS))
def test_a_rewrite_keyed_on_a_value_and_another_field_of_its_cycle_is_found(name: str) -> None:
    report = audit_of(MODEL, PAIRS / f"{name}.jinja")
    kind = OTHER_FIELDS[name]
    assert report.verdict == ("unsafe" if kind == "append" else "tito-required"), report.verdict_reasons
    messages = _messages(report, kind)
    if name in FOUND_BY_A_SWEEP:  # the sweep breaks it before the screen runs
        unnamed = [m for m in messages if m["role"] == "tool" and "name" not in m]
        assert any(str(m["content"]).startswith("{") for m in unnamed), messages
        return
    assert len(messages) == 4, messages  # one tool cycle and its answer
    assert report.scenarios["search"]["pairs"]["candidates"] == 1


# The sweep of texts writes each literal a template looks for at a text's edges too (red team 29): this template's
# ``'{'`` then starts a result answered by its id alone, and the sweep finds the rewrite first
FOUND_BY_A_SWEEP = {"unnamed_json_result_in_history"}


@pytest.mark.parametrize(
    "name",
    [
        "control_json_result_for_a_toolu_id_everywhere",
        "control_unnamed_json_result_everywhere",
        "control_unnamed_result_for_a_toolu_id_everywhere",
        "control_unnamed_json_result_for_a_kimi_id_everywhere",
        "control_path_and_content_arguments_everywhere",
    ],
)
def test_the_same_rewrite_on_every_turn_is_a_clean_safe(name: str) -> None:
    assert_clean_safe(audit_of(MODEL, PAIRS / f"{name}.jinja"))


def test_the_same_pair_alike_on_every_turn_is_no_candidate() -> None:
    """Control: the dotted name and digits written ``value=N`` on every turn alike. Every pair is screened, none is
    a candidate, and the SAFE is clean."""
    report = audit_of(MODEL, PAIRS / "control_dotted_name_numeric_result_every_turn.jinja")
    assert_clean_safe(report)
    screened = report.scenarios["search"]["pairs"]
    cores = len({t[:60] for t in TEXTS})
    # every name with every core, then each other form of a cycle's fields with every core and every name
    assert screened["candidates"] == 0 and screened["screened"] > len(NAME_SHAPES) * cores, screened


def test_a_screen_that_cannot_run_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the template refuses the plainest pair's episode (here: every episode holds a role it refuses), no
    pair is screened, and the SAFE says so (``search:refused:pairs``: not a clean SAFE)."""
    from tito_audit import audit_model, load
    from tito_audit.audit.context import AuditOptions
    from tito_audit.audit.search import pairs
    from tito_audit.scenarios.searched import Conversation

    episode = pairs.episode

    def refused(*args, **kwargs) -> Conversation:  # type: ignore[no-untyped-def]
        made = episode(*args, **kwargs)
        return Conversation(({"role": "refused", "content": "x"}, *made.messages), made.tools, made.kwargs)

    monkeypatch.setattr(pairs, "episode", refused)
    loop = "{%- for message in messages %}"
    refusal = "{%- if message.role == 'refused' %}{{- raise_exception('no such role') }}{%- endif %}"
    template = (PAIRS / "control_dotted_name_numeric_result_every_turn.jinja").read_text()
    assert loop in template
    (tmp_path / "refusing.jinja").write_text(template.replace(loop, loop + refusal, 1))
    report = audit_model(load(MODEL, chat_template_file=tmp_path / "refusing.jinja"), AuditOptions())
    assert report.verdict == "safe", report.verdict_reasons
    assert "pairs" not in report.scenarios["search"], report.scenarios["search"]
    assert "search:refused:pairs" in report.scenarios["not_probed"], report.scenarios.get("not_probed")


def test_a_screen_stopped_before_its_end_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_CANDIDATES`` candidates played (here none may be), the screen stops, and the pairs it left are
    named (``search:pairs:stopped``: not a clean SAFE), never passed over."""
    from tito_audit import audit_model, load
    from tito_audit.audit.search import run
    from tito_audit.report.verdict import describe_reason

    monkeypatch.setattr(run, "MAX_CANDIDATES", 0)
    report = audit_model(load(MODEL, chat_template_file=PAIRS / "dotted_name_numeric_result_in_history.jinja"))
    pairs = report.scenarios["search"]["pairs"]
    assert pairs["candidates"] == 0 and pairs["stopped"] == 1 and pairs["screened"] > 0, pairs
    assert report.verdict == "safe" and "search:pairs:stopped" in report.scenarios["not_probed"], report.verdict_reasons
    assert describe_reason("not_probed:search:pairs:stopped").startswith("the search's screen of pairs")


def test_after_a_re_render_break_the_screen_looks_again_for_buffer_and_delta() -> None:
    """The screen meets a re-render pair first (a capital in a result's name and digits); the search then looks for
    the stronger kind, and the screen runs again with the append's comparison alone, meeting the call pair (a dotted
    name and an email address). On 58f99dc the screen ran once: its second candidate was left to the draws."""
    report = audit_of(MODEL, PAIRS / "rerender_pair_first_then_append_pair.jinja")
    assert report.verdict == "unsafe" and "unsafe:rewrites_on_tool_append" in report.verdict_reasons
    found = report.scenarios["search"]["counterexamples"]
    assert [c["kind"] for c in found] == ["rerender", "append"] and len(found[1]["messages"]) == 4, found
    assert report.scenarios["search"]["pairs"]["candidates"] == 2
