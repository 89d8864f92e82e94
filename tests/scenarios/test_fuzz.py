"""Fuzzing scenario content against the shared models: no crash, every failure a classified RenderError."""

from __future__ import annotations

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tito_audit.audit.simulation import simulate
from tito_audit.rendering import Renderer, RenderError
from tito_audit.rollout import stop_token_ids
from tito_audit.rollout.tokens import special_token_strings
from tito_audit.scenarios.spec import Scenario

MODELS = ("qwen3-0.6b", "mistral-nemo-instruct-2407", "gpt-oss-20b")
CLASSIFIED = {"raised", "type", "security", "timeout", "too_large"}


@cache
def _model(name: str):
    from tito_audit.sources.load import load

    model = load(name)
    renderer = Renderer(model.tokenizer, model.chat_template)
    return model, renderer, stop_token_ids(model.tokenizer, renderer, model.generation_eos_ids)


def _text(specials: list[str]) -> st.SearchStrategy[str]:
    pieces = st.one_of(
        st.text(max_size=40),
        st.sampled_from(specials or ["<|x|>"]),
        st.sampled_from(["\u202e", "\x00", "\ufeff", "🙂", "{{ x }}", "{% raw %}", "\r\n", "\u200b", "\\u0000"]),
        st.integers(1, 200_000).map(lambda n: "z" * n),
    )
    return st.lists(pieces, max_size=6).map("".join)


@st.composite
def conversations(draw):
    name = draw(st.sampled_from(MODELS))
    specials = special_token_strings(_model(name)[0].tokenizer)[:20]
    text = _text(specials)
    msgs = [{"role": "user", "content": draw(text)}]
    if draw(st.booleans()):
        call = {
            "id": "call00001",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": draw(text)}},
        }
        msgs += [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call00001", "name": "get_weather", "content": draw(text)},
        ]
    msgs.append({"role": "assistant", "content": draw(text)})
    return name, msgs


TOOLS = ({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(conversations())
def test_fuzzed_content_never_crashes(case) -> None:
    name, msgs = case
    _, renderer, stops = _model(name)
    try:
        text = renderer.render(msgs, tools=list(TOOLS))
        assert isinstance(text, str)
    except RenderError as err:
        assert err.kind in CLASSIFIED, (err.kind, err.message)
    scenario = Scenario("fuzz", "fuzzed", tuple(msgs), TOOLS, frozenset())
    sim = simulate(renderer, scenario, stops)
    if sim.error is not None:
        assert sim.error.kind in CLASSIFIED, (sim.error.kind, sim.error.message)
    else:
        assert sim.trajectory is not None and sim.trajectory.input_ids


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=5), json_values, max_size=4), max_size=4))
def test_a_scenarios_messages_are_copied_as_a_json_round_trip_gives_them(messages) -> None:
    """``messages_list`` gives what ``json.loads(json.dumps(...))`` gives: equal, with the same types at every level
    (tuples become lists), and no dict or list shared with the scenario."""
    import json

    scenario = Scenario("s", "", tuple(messages), (), frozenset())
    copied, expected = scenario.messages_list(), json.loads(json.dumps(scenario.messages))

    def shape(value):
        if isinstance(value, dict):
            return ("dict", [(k, shape(v)) for k, v in value.items()])
        if isinstance(value, list):
            return ("list", [shape(v) for v in value])
        return (type(value).__name__, value)

    assert shape(copied) == shape(expected)

    def containers(value):
        if isinstance(value, dict | list | tuple):
            yield id(value)
            for item in value.values() if isinstance(value, dict) else value:
                yield from containers(item)

    assert not set(containers(copied)) & set(containers(list(scenario.messages)))


_MODE_VALUES = st.one_of(st.booleans(), st.integers(-1, 2), st.sampled_from([0.0, 1.0, "on", None]), st.just([1]))


@settings(max_examples=150, deadline=None)
@given(
    specials=st.lists(st.sampled_from(["<|im_end|>", "</s>", "<|eot_id|>", "[INST]", "<|x|>"]), max_size=6),
    modes=st.lists(st.dictionaries(st.sampled_from(["enable_thinking", "thinking"]), _MODE_VALUES), max_size=3),
    only=st.sampled_from([None, ("single_call/", "reasoning/"), ("two_calls/plain", "inline_think/plain")]),
)
def test_scenarios_built_once_per_input_equal_a_fresh_build(specials, modes, only) -> None:
    """``build_scenarios`` keeps its scenarios per input (the first four special texts, the modes with each
    value's type, the subset): asked twice, or after an input that is equal but of another type (True and 1),
    it gives what building them afresh gives."""
    from tito_audit.scenarios.catalog import _build_all, build_scenarios

    modes = modes or [{}]
    for _ in range(2):
        built = build_scenarios(specials, modes, only)
        fresh = _build_all(specials[:4], modes, only)
        assert [(s.id, s.messages, s.tags, s.template_kwargs) for s in built] == [
            (s.id, s.messages, s.tags, s.template_kwargs) for s in fresh
        ]
        assert [[type(v) for _, v in s.template_kwargs] for s in built] == [
            [type(v) for _, v in s.template_kwargs] for s in fresh
        ]
