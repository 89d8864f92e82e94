"""Calls that disagree with their tools' schemas (``search/schemas.py``), and a system prompt that says a word the
template looks for (``SearchSpace.system``).

Every conversation of the search declared its tools from its own calls, so a template that rewrites an earlier
call by its tool's declaration (arguments in the declared order, a default left out, an enum's spelling, a key a
client sets) met no call the declaration changes: each was a clean SAFE on ecb7973 (the enum's named one arm), as
were red team 22's six of that kind, and red team 24's rewrites by what pydantic declares (a writeOnly password,
a maxLength, an array, a nullable value). And the search wrote the literals a template looks for into every text
but the system prompt: a template that drops earlier reasoning when the system prompt asks to be brief was a clean
SAFE.
The templates (``tests/data/search/schemas/``) are ChatML with tools on Qwen2.5's tokenizer.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.audit.search.qwen_rewrites import MODEL, assert_clean_safe, assert_lost, sampled_call_rewritten
from tests.conftest import DATA, audit_of
from tito_audit.audit.search.schemas import SCHEMA_TOOLS, sweep_schemas
from tito_audit.audit.search.space import SearchSpace

SCHEMAS = DATA / "search" / "schemas"
CALL_REWRITES = (
    "declared_order_in_history",
    "defaults_dropped_in_history",
    "enum_spelling_in_history",
    "private_keys_dropped_in_history",
    # what pydantic declares (red team 24): a writeOnly password redacted, a null optional value left out
    "secrets_redacted_in_history",
    "nulls_dropped_in_history",
)


def _declared(name: str) -> dict[str, Any]:
    return next(t["function"] for t in SCHEMA_TOOLS if t["function"]["name"] == name)


@pytest.mark.parametrize("name", CALL_REWRITES)
def test_a_call_rewritten_by_its_tools_schema_in_history_is_unsafe(name: str) -> None:
    """The result's append re-renders the sampled call: UNSAFE, shown on one tool cycle of the schema sweep."""
    call = sampled_call_rewritten(audit_of(MODEL, SCHEMAS / f"{name}.jinja"))
    assert call["name"] in {t["function"]["name"] for t in SCHEMA_TOOLS}, call


# on every turn alike, a password redacted and a private key left out are never seen by the model (red team 44's
# reading of lost values); the others lose nothing a tool reads (a default, a null) or only reorder and respell
LOST_EVERYWHERE = ("private_keys_dropped_everywhere", "secrets_redacted_everywhere")


@pytest.mark.parametrize(
    "name",
    [
        n.replace("_in_history", "_everywhere")
        for n in CALL_REWRITES
        if n.replace("_in_history", "_everywhere") not in LOST_EVERYWHERE
    ],
)
def test_the_same_schema_rewrite_on_every_turn_is_a_clean_safe(name: str) -> None:
    assert_clean_safe(audit_of(MODEL, SCHEMAS / f"control_{name}.jinja"))


@pytest.mark.parametrize("name", LOST_EVERYWHERE)
def test_the_same_schema_rewrite_on_every_turn_that_hides_a_value_is_unsafe(name: str) -> None:
    assert_lost(audit_of(MODEL, SCHEMAS / f"control_{name}.jinja"), "unsafe:drops_arguments")


def test_reasoning_dropped_where_the_system_prompt_says_brief_is_found() -> None:
    """The template looks for "brief" in the system prompt; the sweep of texts writes it there: the re-render
    breaks (TITO-REQUIRED), and the counterexample's system prompt says it."""
    report = audit_of(MODEL, SCHEMAS / "reasoning_dropped_when_the_system_says_brief.jinja")
    assert report.verdict == "tito-required", report.verdict_reasons
    (found, *_) = report.scenarios["search"]["counterexamples"]
    assert found["kind"] == "rerender", found
    assert found["messages"][0]["role"] == "system" and "brief" in found["messages"][0]["content"], found
    assert_clean_safe(audit_of(MODEL, SCHEMAS / "control_reasoning_dropped_when_the_system_says_brief.jinja"))


def test_the_schema_sweep_disagrees_with_its_declarations_as_models_do() -> None:
    """Each way a call can disagree with its declaration that the module docstring names is in the sweep."""
    calls = [c["function"] for m in sweep_schemas(SearchSpace()).messages for c in m.get("tool_calls") or []]
    seen = set()
    for call in calls:
        declared = _declared(call["name"])
        props = declared["parameters"]["properties"]
        given = list(call["arguments"])
        if given != [k for k in props if k in given]:
            seen.add("order")
        if declared.get("strict"):
            seen.add("strict")
        for key, value in call["arguments"].items():
            if key not in props:
                seen.add("a key not declared")
                continue
            prop = props[key]
            if isinstance(value, int | float) and value > prop.get("maximum", value):
                seen.add("past maximum")
            if prop.get("type") == "string" and isinstance(value, int | float):
                seen.add("a number for a string")
            if "default" in prop and value == prop["default"]:
                seen.add("default")
            if prop.get("type") in ("integer", "boolean") and isinstance(value, str):
                seen.add(f"{prop['type']} as a string")
            if "enum" in prop and value not in prop["enum"] and str(value).lower() in prop["enum"]:
                seen.add("enum spelling")
            if key.startswith("_") or "." in key:
                seen.add(f"key {key[0] if key.startswith('_') else '.'}")
            if prop.get("writeOnly"):
                seen.add("a secret")
            if isinstance(value, str) and len(value) > prop.get("maxLength", len(value)):
                seen.add("past maxLength")
            if prop.get("type") == "array" and not isinstance(value, list):
                seen.add("one value for a list")
            if value is None and {"type": "null"} in prop.get("anyOf", []):
                seen.add("null for an optional value")
    expected = {"order", "strict", "default", "integer as a string", "boolean as a string", "enum spelling"}
    pydantic = {"a secret", "past maxLength", "one value for a list", "null for an optional value"}
    disagreeing = {"a key not declared", "past maximum", "a number for a string"}  # red team 28
    assert seen >= expected | pydantic | disagreeing | {"key _", "key ."}, seen
