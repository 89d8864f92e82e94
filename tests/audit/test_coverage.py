"""Template coverage (issue 40): an arm of the template that history can reach and no conversation took is named
(``not_probed:template_line:N: TEST``), and a SAFE that names one is not a clean SAFE: exit 3 unless
``--allow-not-probed``. On 507ac91 the same template was a clean SAFE (exit 0, nothing named)."""

from __future__ import annotations

from tests.conftest import DATA, audit_of, tito

TEMPLATE = DATA / "search" / "developer_branch.jinja"
TOKENIZER = "qwen3-0.6b"
LINE = next(n for n, line in enumerate(TEMPLATE.read_text().splitlines(), 1) if "'developer'" in line)


def test_an_arm_no_conversation_takes_is_named_with_its_line_and_test() -> None:
    r = audit_of(TOKENIZER, TEMPLATE, scenarios="quick")
    assert r.verdict == "safe"
    reason = f"not_probed:template_line:{LINE}: (message.role == 'developer')"
    assert reason in r.verdict_reasons, r.verdict_reasons
    coverage = r.scenarios["coverage"]
    assert {"line": LINE, "test": "(message.role == 'developer')"} in coverage["unexercised"]
    assert coverage["ran"] == coverage["arms"] - 1  # every other arm ran


def test_the_plain_template_has_no_arm_left() -> None:
    r = audit_of(TOKENIZER, DATA / "search" / "base.jinja", scenarios="quick")
    assert r.verdict == "safe" and r.scenarios["coverage"]["unexercised"] == []
    assert not any(x.startswith("not_probed:") for x in r.verdict_reasons)


def test_a_safe_that_names_a_gap_exits_3_unless_allowed() -> None:
    out = tito("audit", TOKENIZER, "--chat-template", TEMPLATE, "-q")
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "SAFE does not cover what was not probed" in out.stderr and "'developer'" in out.stderr
    assert tito("audit", TOKENIZER, "--chat-template", TEMPLATE, "-q", "--allow-not-probed").returncode == 0
    assert tito("audit", TOKENIZER, "--chat-template", DATA / "search" / "base.jinja", "-q").returncode == 0
