"""A template that prints the time of day is at least tito-required (issue 40, class 4); one that prints only the
date keeps its date pinned and its warning."""

from __future__ import annotations

import datetime as dt

import pytest

from tests.conftest import DATA, audit_of
from tito_audit.audit.checks.time_of_day import other_time

CLOCK = DATA / "clock"


def test_a_template_that_prints_the_time_is_tito_required() -> None:
    """`Current time: {{ strftime_now('%H:%M') }}` in the system line: every render of the audit sees the pinned
    time, so buffer + delta and naive re-rendering agree, yet a re-render a minute later differs."""
    report = audit_of("qwen2.5-7b-instruct", CLOCK / "prints_time_of_day.jinja")
    assert report.verdict == "tito-required" and "tito-required:time_of_day" in report.verdict_reasons
    check = report.check("time_of_day")
    assert check.status == "warn" and check.findings[0].cls == "date"


def test_the_time_in_the_generation_prompt_alone_is_read_too() -> None:
    """`[12:00 PM]` written only in the generation prompt: the episode's render has no time, its last turn's prompt
    has it."""
    report = audit_of("qwen2.5-7b-instruct", CLOCK / "time_in_generation_prompt.jinja")
    assert report.check("time_of_day").status == "warn"
    assert "tito-required:time_of_day" in report.verdict_reasons


def test_the_time_in_a_system_message_alone_is_read_too() -> None:
    """A system message stamped `(sent 12:00)`: the first episodes played have no system message, one of the
    episodes compared (one per shape: the roles it has, the kwargs it is played under) has."""
    report = audit_of("qwen2.5-7b-instruct", CLOCK / "time_in_system_message.jinja")
    assert report.verdict == "tito-required" and "tito-required:time_of_day" in report.verdict_reasons


def test_a_template_that_prints_only_the_date_keeps_its_verdict() -> None:
    """`Today: Thursday 15 January 2026`: the same at every time of the pinned day; time_invariance warns (another
    day renders another date), the verdict does not move."""
    report = audit_of("qwen2.5-7b-instruct", CLOCK / "prints_date.jinja")
    assert report.check("time_of_day").status == "pass"
    assert report.check("time_invariance").status == "warn"
    assert report.verdict == "safe", report.verdict_reasons


@pytest.mark.parametrize(
    "when", [dt.datetime(2026, 1, 15, 12), dt.datetime(2026, 1, 15, 0, 29, 31), dt.datetime(2024, 2, 29, 23, 59, 59)]
)
def test_the_other_time_is_the_same_day_with_every_field_of_the_time_changed(when: dt.datetime) -> None:
    later = other_time(when)
    assert later.date() == when.date()
    assert later.hour != when.hour and later.minute != when.minute and later.second != when.second
    assert (later.hour < 12) != (when.hour < 12)


@pytest.mark.parametrize("name", ["prints_12_hour_clock", "tests_the_seconds"])
def test_a_template_that_reads_the_time_of_day_is_tito_required_even_where_two_times_agree(name: str) -> None:
    """strftime_now('%I') prints '12' at 12:00:00 and at 00:29:31; a test of the seconds ('%S' > 40) is false at
    both: the renders agree, but the template reads the time of day, so another minute may render otherwise."""
    report = audit_of("qwen2.5-7b-instruct", DATA / "clock" / f"{name}.jinja")
    assert report.verdict == "tito-required", report.verdict_reasons
    assert "tito-required:time_of_day" in report.verdict_reasons
    [finding] = report.check("time_of_day").findings
    assert "reads the time of day" in finding.message
