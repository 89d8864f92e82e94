"""The switches a template reads (rendering/switch_reads.py): variables compared with or tested against values,
read from its code, never from a list of names."""

from __future__ import annotations

from jinja2 import Environment

from tito_audit.rendering.switch_reads import read_switches


def switches(source: str) -> dict[str, tuple[object, ...]]:
    return dict(read_switches(Environment().parse(source)))


def test_values_a_variable_is_compared_with_are_read() -> None:
    read = switches(
        "{% if reasoning_effort == 'low' %}a{% elif reasoning_effort in ['medium', 'high'] %}b{% endif %}"
        "{% if mode|lower != 'compact' %}c{% endif %}{% if level is sameas 2 %}d{% endif %}"
    )
    assert read["reasoning_effort"] == ("low", "medium", "high")
    assert read["mode"] == ("compact",)
    assert read["level"] == (2,)


def test_a_variable_tested_for_truth_or_definedness_is_read_with_both_booleans() -> None:
    read = switches(
        "{% if compact %}x{% endif %}{% if not verbose %}y{% endif %}{% if tools_hint is defined %}{% endif %}"
    )
    assert read == {"compact": (True, False), "verbose": (True, False), "tools_hint": (True, False)}


def test_a_variable_the_template_sets_is_no_switch_unless_set_only_as_a_default() -> None:
    read = switches(
        "{% for message in messages %}{% set content = message.content %}{% if content %}{{ content }}{% endif %}"
        "{% endfor %}{% macro m(flag) %}{% if flag %}x{% endif %}{% endmacro %}"
        "{% if effort is not defined %}{% set effort = 'medium' %}{% endif %}{% if effort == 'low' %}l{% endif %}"
    )
    assert "content" not in read and "message" not in read and "flag" not in read
    assert read["effort"] == (True, False, "low")  # a default the caller overrides: still a switch
