"""Issue 40, class 3: a switch the template reads is played on the values it compares it with, or named as not
probed (tests/data/search/*_switch.jinja; on 507ac91 both came out SAFE with no caveat)."""

from __future__ import annotations

from tests.conftest import DATA, audit_of
from tito_audit import load
from tito_audit.audit.context import AuditContext, AuditOptions
from tito_audit.scenarios.switches import candidate_switches, playable

TOKENIZER = "qwen3-0.6b"


def test_a_switch_compared_with_a_value_is_played_at_it() -> None:
    """``reasoning_effort == 'low'`` drops the reasoning of every turn but the last: played at 'low', a tool append
    rewrites the history. Not a reasoning switch by its booleans (True and False render as unset), so only the
    value the template compares it with shows it."""
    path = DATA / "search" / "effort_switch.jinja"
    ctx = AuditContext(load(TOKENIZER, chat_template_file=str(path)), AuditOptions(scenarios="quick"))
    assert "reasoning_effort" not in ctx.thinking_switches
    assert ctx.switches.values() == {"reasoning_effort": ("low",)}
    r = audit_of(TOKENIZER, path, scenarios="quick")
    assert r.verdict == "unsafe", r.verdict_reasons
    hit = {f.scenario for f in r.check("tool_append_prefix").findings}
    assert 'switch/reasoning_effort="low"' in hit


def test_a_switch_whose_rewrite_needs_more_than_the_switch_is_found_by_the_search() -> None:
    """``history_mode == 'compact'`` cuts earlier tool results to 20 characters: the switch scenario's results are
    shorter, so only the search, which draws the switch's values with longer texts, shows the rewrite."""
    r = audit_of(TOKENIZER, DATA / "search" / "history_mode_switch.jinja", scenarios="quick")
    assert r.verdict in ("unsafe", "tito-required"), r.verdict_reasons
    found = r.scenarios["search"]["counterexamples"]
    assert found and 'history_mode="compact"' in found[0]["conversation"]
    assert (
        audit_of(TOKENIZER, DATA / "search" / "history_mode_switch.jinja", scenarios="quick", search=0).verdict
        == "safe"
    )


def test_a_switch_no_value_of_which_renders_is_named() -> None:
    def renders(kwargs: dict[str, object]) -> bool:
        return kwargs != {"strict": "x"} and "strict" not in kwargs

    switches = playable(
        candidate_switches([("strict", ("x",)), ("tools", (True, False))], {"strict", "tools"}, ()), renders
    )
    assert switches.played == () and switches.not_probed == ("switch:strict",)
