"""``arguments_dict``: the one reading of a tool call's arguments that every caller shares (a dict, or OpenAI's JSON
string of one), and what each caller makes of arguments that are neither."""

from __future__ import annotations

import json

import pytest

from tito_audit.audit.checks.tool_support import _argument_values
from tito_audit.rollout.call_arguments import arguments_dict
from tito_audit.rollout.payloads import _arguments
from tito_audit.scenarios.searched import _count

ARGS = {"city": "Paris", "days": 3, "units": {"temp": "C"}}


@pytest.mark.parametrize("form", [ARGS, json.dumps(ARGS), json.dumps(ARGS, indent=2, ensure_ascii=False)])
def test_a_dict_and_its_json_string_read_alike(form: object) -> None:
    assert arguments_dict(form) == ARGS
    assert _count(form) == 3
    assert _arguments(form) == ["Paris", "C"]  # nested objects' strings too
    assert _argument_values(form) == ARGS  # every top-level value, whatever its type


@pytest.mark.parametrize("text", ["check the weather", "{'city': 'Paris'}", "[1, 2]", '"Paris"', "[" * 100_000])
def test_a_string_that_is_not_json_of_an_object_is_no_arguments(text: str) -> None:
    """Not JSON (a Python repr, free text), JSON of another type, or nested past what the decoder reads: never a
    crash, and each caller keeps the text as one value."""
    assert arguments_dict(text) is None
    assert _count(text) == 1
    assert _arguments(text) == [text]
    assert _argument_values(text) == {"": text}


@pytest.mark.parametrize("value", [None, 3, ["a"], ""])
def test_other_values_are_no_arguments(value: object) -> None:
    assert arguments_dict(value) is None
    assert _argument_values(value) == {}
