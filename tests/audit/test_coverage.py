"""Template coverage (issue 40): an arm of the template that history can reach and no conversation took is named
(``not_probed:template_line:N: TEST``), and a SAFE that names one is not a clean SAFE: exit 3 unless
``--allow-not-probed``. On 507ac91 the same template was a clean SAFE (exit 0, nothing named)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import DATA, audit_of, tito
from tito_audit.scenarios.reach import MAX_WIDTH

TEMPLATE = DATA / "search" / "custom_role_branch.jinja"
TOKENIZER = "qwen3-0.6b"
LINE = next(n for n, line in enumerate(TEMPLATE.read_text().splitlines(), 1) if "'critic'" in line)


def test_an_arm_no_conversation_takes_is_named_with_its_line_and_test() -> None:
    r = audit_of(TOKENIZER, TEMPLATE, scenarios="quick")
    assert r.verdict == "safe"
    reason = f"not_probed:template_line:{LINE}: (message.role == 'critic')"
    assert reason in r.verdict_reasons, r.verdict_reasons
    coverage = r.scenarios["coverage"]
    assert {"line": LINE, "test": "(message.role == 'critic')"} in coverage["unexercised"]
    assert coverage["ran"] == coverage["arms"] - 1  # every other arm ran


def test_a_developer_arm_runs_where_the_search_sends_that_role() -> None:
    """The same arm for OpenAI's ``developer`` role: the template names the role and renders it, so the search's
    draws send one after a user turn, and the arm runs (before, no conversation sent one and SAFE named it)."""
    r = audit_of(TOKENIZER, DATA / "search" / "developer_branch.jinja", scenarios="quick")
    assert r.verdict == "safe" and r.scenarios["coverage"]["unexercised"] == [], r.verdict_reasons
    assert not any(x.startswith("not_probed:") for x in r.verdict_reasons)


def test_the_plain_template_has_no_arm_left() -> None:
    r = audit_of(TOKENIZER, DATA / "search" / "base.jinja", scenarios="quick")
    assert r.verdict == "safe" and r.scenarios["coverage"]["unexercised"] == []
    assert not any(x.startswith("not_probed:") for x in r.verdict_reasons)


def test_a_safe_that_names_a_gap_exits_3_unless_allowed() -> None:
    out = tito("audit", TOKENIZER, "--chat-template", TEMPLATE, "-q")
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "SAFE does not cover what was not probed" in out.stderr and "'critic'" in out.stderr
    assert tito("audit", TOKENIZER, "--chat-template", TEMPLATE, "-q", "--allow-not-probed").returncode == 0
    assert tito("audit", TOKENIZER, "--chat-template", DATA / "search" / "base.jinja", "-q").returncode == 0


def _traced(template: Path, until_complete: bool):  # type: ignore[no-untyped-def]
    """The coverage of ``template``'s quick scenarios, traced once (``until_complete`` or every render)."""
    from tito_audit import load
    from tito_audit.audit.context import AuditContext, AuditOptions
    from tito_audit.audit.coverage import Coverage

    ctx = AuditContext(load(TOKENIZER, chat_template_file=str(template)), AuditOptions(scenarios="quick", search=0))
    assert all(s.ok for s in ctx.simulations)
    coverage = Coverage.of(ctx)
    assert isinstance(coverage, Coverage)
    pending = len(ctx.renderer._shared.untraced)
    coverage.trace(until_complete)
    return coverage, pending


@pytest.mark.parametrize("name", ["base.jinja", "developer_branch.jinja"])
def test_coverage_stops_replaying_only_where_nothing_left_can_change_it(name: str) -> None:
    """An unsteered trace (the scan's: ``--search`` under 20) stops once every arm history can reach has run; what
    it reports is the full replay's. A template with an arm never taken replays everything."""
    full, pending = _traced(DATA / "search" / name, until_complete=False)
    early, early_pending = _traced(DATA / "search" / name, until_complete=True)
    assert early.summary() == full.summary() and early.not_probed() == full.not_probed()
    assert full.replayed == pending
    if full.unexercised():
        assert early.replayed == early_pending
    else:
        assert 0 < early.replayed < early_pending, (early.replayed, early_pending)


CONSTRUCTS = DATA / "search" / "constructs"
CONSTRUCT_NAMES = ["and_or", "loop_filter", "value_slice", "renamed_loop"]


def beyond_wide(name: str, tmp_path: Path) -> Path:
    """The construct with its rewrite keyed on 300 arguments instead of 12: past what a derived ``wide`` episode
    plays (``scenarios.reach.MAX_WIDTH``), so that only coverage can tell that it was not exercised."""
    assert MAX_WIDTH < 300
    copy = tmp_path / f"{name}.jinja"
    copy.write_text((CONSTRUCTS / f"{name}.jinja").read_text().replace(">= 12", ">= 300"))
    return copy


@pytest.mark.parametrize("name", CONSTRUCT_NAMES)
def test_the_red_teams_constructs_are_played_past_their_argument_count(name: str) -> None:
    """Each rewrites history past 11 call arguments: the number it tests is read from its code and played
    (``wide/N``), so it is UNSAFE on the quick set with no search, whatever coverage could count."""
    r = audit_of(TOKENIZER, CONSTRUCTS / f"{name}.jinja", scenarios="quick", search=0)
    assert r.verdict == "unsafe", r.verdict_reasons
    assert any(f.scenario.startswith("wide/") for f in r.check("tool_append_prefix").findings)


@pytest.mark.parametrize(
    ("name", "named", "where"),
    [
        # the and/or idiom: the operand that picks '{}' for history is never true
        ("and_or", "(f.arguments is mapping and (f.arguments|length >= 300))", "and '{}' or"),
        # the loop filter: no call is ever dropped by it
        ("loop_filter", "else of outer.last or (not (tc.function.arguments is mapping", "if outer.last or"),
        # an and/or inside a slice bound, read after a top-level {% if %}
        ("value_slice", "outer.index0 == ns.cut", "== ns.cut and"),
    ],
)
def test_a_value_picked_by_and_or_or_a_loop_filter_is_an_arm(name: str, named: str, where: str, tmp_path: Path) -> None:
    """A red team rewrote history past 11 call arguments (the most the search draws) through constructs coverage did
    not measure, each a clean SAFE with exit 0: the ``COND and A or B`` idiom, a loop filter, an and/or in a slice
    bound. Each operand that decides whether the next is read, and each loop filter's test, is now an arm: the one no
    conversation took is named (here keyed on 300 arguments, which no scenario plays)."""
    template = beyond_wide(name, tmp_path)
    r = audit_of(TOKENIZER, template, scenarios="quick", search=0)
    gaps = [x for x in r.verdict_reasons if x.startswith("not_probed:template_line")]
    assert r.verdict == "safe" and any(named in g for g in gaps), r.verdict_reasons
    line = next(n for n, text in enumerate(template.read_text().splitlines(), 1) if where in text)
    assert all(g.startswith(f"not_probed:template_line:{line}: ") for g in gaps), (line, gaps)


def test_a_template_whose_message_loop_is_not_recognized_names_that_its_arms_were_not_measured(tmp_path: Path) -> None:
    """A red team renamed the list the loop runs over (``{% set conv = messages %}{% for msg in conv %}``): no arm
    was counted as history's, and the SAFE was clean (``arms: 0``). Coverage that cannot tell history's arms is
    named, never a pass."""
    r = audit_of(TOKENIZER, beyond_wide("renamed_loop", tmp_path), scenarios="quick", search=0)
    assert r.verdict == "safe" and "not_probed:coverage:no_message_loop" in r.verdict_reasons, r.verdict_reasons


def test_an_and_or_inside_a_test_is_no_arm_and_one_that_picks_a_value_is() -> None:
    """The review's point: the arms are counted on a template whose test's and/or would add some if it were not
    excluded (this fails with the exclusion removed)."""
    from tito_audit.rendering.analysis import compiled_template, template_code
    from tito_audit.rendering.coverage import TemplateBranches

    def arms(body: str) -> list[str]:
        template = "{%- for m in messages %}" + body + "{%- endfor %}"
        branches = TemplateBranches(template_code(template), compiled_template(template).debug_info)
        return sorted(b.test for b in branches.branches if b.history)

    # an {% if %}'s and/or: the if's own arm only (its operands are not arms again)
    assert arms("{%- if m.role == 'x' and m.content %}A{%- endif %}") == ["((m.role == 'x') and m.content)"]
    # an and/or that picks a value: each operand but the last, read or not
    assert arms("{{- m.role == 'x' and 'A' or 'B' }}") == [
        "(m.role == 'x') and 'A'",
        "else of (m.role == 'x') and 'A'",
        "else of m.role == 'x'",
        "m.role == 'x'",
    ]


def test_a_filter_on_the_message_loop_itself_is_history() -> None:
    """The review's point: jinja writes the filter of ``{% for m in messages if TEST %}`` before the loop, where
    history's lines were not counted; the filter decides which messages history holds."""
    from tito_audit.rendering.analysis import compiled_template, template_code
    from tito_audit.rendering.coverage import TemplateBranches

    template = "{%- for m in messages if m.role != 'assistant' or m == messages[-1] %}{{ m.content }}{%- endfor %}"
    branches = TemplateBranches(template_code(template), compiled_template(template).debug_info).branches
    assert [b.history for b in branches] == [True, True] and branches[1].test.startswith("else of ")
