"""Scenarios derived from what a template's code reads, played beside the catalogue's (``AuditContext.scenarios``).

The catalogue (``catalog``) plays fixed conversations; these are built from the template's own readings
(``scenarios.reasoning``, ``scenarios.reach``): empty reasoning where reasoning renders, each message key it
renders, and conversations past the lengths, counts and literals it tests (long episodes, long texts, rewrite
literals, wide calls, parallel calls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from tito_audit.scenarios.catalog import SHAPES, build_messages, in_modes
from tito_audit.scenarios.reach import MAX_DEPTH, MAX_PARALLEL, Reach, long_text, with_literals
from tito_audit.scenarios.reasoning import Reasoning
from tito_audit.scenarios.spec import Message, Scenario, ScenarioSpec


def derived_scenarios(
    reasoning: Reasoning,
    special_texts: Sequence[str] = (),
    thinking_modes: Sequence[dict[str, Any]] = ({},),
    reach: Reach | None = None,
) -> list[Scenario]:
    """Scenarios derived from what this template reads (``scenarios.reasoning``), played beside the catalog's:

    - ``reasoning_empty/plain``: a tool call and an answer, each with empty reasoning (``reasoning_content: ""``),
      where reasoning reaches the render (some templates keep or drop an empty block differently from a full one);
    - ``field/KEY``: a user follow-up episode with the message key ``KEY`` set on the messages of every role the
      template renders it for (a marker written at a turn's end and dropped once a user turn follows);
    - ``long/N`` (``reach.cycles``): an episode of N tool cycles and a follow-up, past the conversation lengths the
      template tests (``messages|length > 9``, ``loop.index``, a counter); the texts of its first cycle are long,
      in lines and paragraphs too, and past the text lengths it tests (``reach.early_length``: a result cut,
      squeezed or reduced to its first line only once it is old enough);
    - ``long_text/N`` (``reach.length``): a follow-up episode whose every text (user, arguments, tool output,
      answer, reasoning) holds N characters, past the text lengths it tests or cuts (``|length > 300``, ``[:300]``);
    - ``literals/plain`` (``reach.literals``): a follow-up episode with the literals it rewrites text with in every
      text (``'\\n'`` in tool-call arguments);
    - ``names/plain`` (``reach.renames``): a follow-up episode whose tool names and argument keys are written in
      mixed case and hold the literals a name can hold that it rewrites, looks for or keeps anywhere in its code
      (``getWeather.Now``), where it folds case (``f.name|lower``) or has such literals
      (``name|replace('.', '_')``, ``'__' in f.name``, a table ``{':': '_'}``);
    - and, played last, ``wide/N`` (``wide_scenarios``).
    """
    out: list[Scenario] = []
    if reasoning.mode in ("field", "inline"):
        spec = ScenarioSpec(
            "reasoning_empty/plain",
            SHAPES["reasoning"],
            "plain",
            'empty reasoning (reasoning_content "") on every assistant turn',
            frozenset({"thinking", "derived"}),
        )
        messages = [
            {**m, "reasoning_content": ""} if "reasoning_content" in m else m
            for m in build_messages(spec, special_texts)
        ]
        out += in_modes(spec, messages, thinking_modes)
    for key, roles in reasoning.fields:
        spec = ScenarioSpec(
            f"field/{key}",
            SHAPES["followup_user"],
            "plain",
            f"the message key {key!r} set on {', '.join(roles)} messages",
            frozenset({"derived"}),
        )
        built = build_messages(spec, special_texts)
        messages = [{**m, key: f"{key}{i}"} if m["role"] in roles else m for i, m in enumerate(built)]
        out += in_modes(spec, messages, ({},))
    if reach is not None:
        out += _reach_scenarios(reach, reasoning, special_texts, thinking_modes)
    return out


def _reach_scenarios(
    reach: Reach, reasoning: Reasoning, special_texts: Sequence[str], thinking_modes: Sequence[dict[str, Any]]
) -> list[Scenario]:
    out: list[Scenario] = []
    followup = SHAPES["reasoning_followup"] if reasoning.mode else SHAPES["followup_user"]
    if reach.cycles:
        steps = ("user", *("call", "tool") * reach.cycles, "final", "user", "final")
        spec = ScenarioSpec(
            f"long/{reach.cycles}",
            steps,
            "plain",
            f"{reach.cycles} tool cycles, then a follow-up",
            frozenset({"derived"}),
        )
        messages = build_messages(spec, special_texts)
        if reach.early_length:
            messages = _first_cycle_long(messages, reach.early_length)
        out += in_modes(spec, messages, ({},))
    for sid, desc, rewrite in (
        (f"long_text/{reach.length}", f"every text {reach.length} characters long", reach.length > 0),
        ("literals/plain", f"every text holds {', '.join(map(repr, reach.literals))}", bool(reach.literals)),
    ):
        if not rewrite:
            continue
        spec = ScenarioSpec(sid, followup, "plain", desc, frozenset({"derived"}))
        if reach.length and sid.startswith("long_text"):
            messages = [
                _rewritten(m, lambda t, k: long_text(reach.length, k)) for m in build_messages(spec, special_texts)
            ]
        else:
            messages = [
                _rewritten(m, lambda t, k: with_literals(t, reach.literals))
                for m in build_messages(spec, special_texts)
            ]
        out += in_modes(spec, messages, thinking_modes)
    if reach.renames:
        out += names_scenario(reach, special_texts)
    return out


def names_scenario(reach: Reach, special_texts: Sequence[str] = ()) -> list[Scenario]:
    """``names/plain``: a follow-up episode whose tool names and argument keys are in mixed case and hold
    ``reach.names`` (each tool declared, each result naming its call's tool)."""
    shown = ", ".join(map(repr, reach.names))
    desc = "tool names and argument keys in mixed case" + (f" holding {shown}" if reach.names else "")
    spec = ScenarioSpec("names/plain", SHAPES["followup_user"], "plain", desc, frozenset({"derived"}))
    messages = [_named(m, reach.names) if m.get("tool_calls") else m for m in build_messages(spec, special_texts)]
    return _declared(in_modes(spec, _results_named(messages), ({},)))


def _mixed(word: str) -> str:
    """``word`` in camelCase (``get_weather``: ``getWeather``; one word gets a second: ``city``: ``cityName``)."""
    head, *rest = word.split("_")
    return head + ("".join(p[:1].upper() + p[1:] for p in rest) if rest else "Name")


def _named(message: Message, literals: Sequence[str]) -> Message:
    """``message`` with each call's tool name and argument keys in mixed case, each followed by each literal and a
    word (``getWeather.Now``, ``cityName.Now``)."""
    tail = "".join(f"{lit}Now" for lit in literals)

    def named(fn: dict[str, Any]) -> dict[str, Any]:
        fn["name"] = _mixed(fn["name"]) + tail
        if isinstance(fn["arguments"], dict):
            fn["arguments"] = {_mixed(k) + tail: v for k, v in fn["arguments"].items()}
        return fn

    return _with_functions(message, named)


def _with_functions(message: Message, change: Callable[[dict[str, Any]], dict[str, Any]]) -> Message:
    """``message`` with each call's function replaced by ``change`` of a copy of it."""
    return {**message, "tool_calls": [{**c, "function": change(dict(c["function"]))} for c in message["tool_calls"]]}


def _first_cycle_long(messages: list[Message], chars: int) -> list[Message]:
    """``messages`` with the texts of the first call turn and of the first result after it ``chars`` long."""
    first = next((i for i, m in enumerate(messages) if m.get("tool_calls")), None)
    if first is None:
        return messages
    result = next((i for i in range(first + 1, len(messages)) if messages[i]["role"] == "tool"), first)
    return [
        _rewritten(m, lambda t, k: long_text(chars, k)) if i in (first, result) else m for i, m in enumerate(messages)
    ]


def wide_scenarios(reach: Reach, special_texts: Sequence[str] = ()) -> list[Scenario]:
    """Played after every other scenario (``AuditContext.scenarios``), so that a check that reads only the first
    episodes fit for it (``continuation`` in the quick set) keeps the ones it had:

    - ``wide/N`` (``reach.widths``): tool cycles whose calls carry those numbers of top-level arguments (up to N),
      the first added one a list of as many objects, the last a key name as long holding objects nested as deep,
      to tools named with as many characters (``_widened``), at and past the numbers the template tests a length
      with that may count items (``arguments|length >= 12``, ``keys[11:12]``), then a follow-up;
    - ``parallel/N``: the widths between the catalogue's three parallel calls and ``MAX_PARALLEL``, each a turn of
      that many parallel calls (two of one tool, the others each of its own) and their results, then a follow-up
      (apart from ``wide``: a template that cannot show parallel calls still has its wide calls played).

    Every tool a call names is declared (``_declared``), as a loop declares what its model may call."""
    widths = reach.widths
    if not widths:
        return []
    steps = ("user", *("call", "tool") * len(widths), "final", "user", "final")
    desc = f"calls with {', '.join(map(str, widths))} top-level arguments, then a follow-up"
    spec = ScenarioSpec(f"wide/{widths[-1]}", steps, "plain", desc, frozenset({"derived"}))
    calls = iter(widths)
    messages = [_widened(m, next(calls)) if m.get("tool_calls") else m for m in build_messages(spec, special_texts)]
    out = _declared(in_modes(spec, _results_named(messages), ({},)))
    parallel = [w for w in widths if 3 < w <= MAX_PARALLEL][-2:]
    if parallel:
        steps = ("user", *("call", "tool") * len(parallel), "final", "user", "final")
        desc = f"turns of {', '.join(map(str, parallel))} parallel calls, then a follow-up"
        spec = ScenarioSpec(f"parallel/{parallel[-1]}", steps, "plain", desc, frozenset({"derived"}))
        messages = _results_named(_parallel(build_messages(spec, special_texts), parallel))
        out += _declared(in_modes(spec, messages, ({},)))
    return out


def _declared(scenarios: list[Scenario]) -> list[Scenario]:
    """``scenarios`` with a declaration for every tool their calls name that the catalogue's tools lack (a copy of
    the first one's, renamed): a loop declares every tool its model calls."""
    out = []
    for scenario in scenarios:
        known = {t["function"]["name"] for t in scenario.tools}
        names = [c["function"]["name"] for m in scenario.messages for c in m.get("tool_calls") or []]
        first = scenario.tools[0]
        more = [
            {**first, "function": {**first["function"], "name": name}}
            for name in dict.fromkeys(names)
            if name not in known
        ]
        out.append(replace(scenario, tools=(*scenario.tools, *more)) if more else scenario)
    return out


def _results_named(messages: list[Message]) -> list[Message]:
    """``messages`` with each tool result that gives its tool's name giving the name of the call it answers."""
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or [] if "id" in c}
    return [
        {**m, "name": names[m["tool_call_id"]]}
        if m["role"] == "tool" and "name" in m and m.get("tool_call_id") in names
        else m
        for m in messages
    ]


def _long_name(name: str, width: int) -> str:
    """``name``, grown to ``width`` characters where it is shorter (``get_weather_xxxx``: a long MCP-style name)."""
    return name if len(name) >= width else f"{name}_".ljust(width, "x")


def _widened(message: Message, width: int) -> Message:
    """``message`` with each of its calls grown to ``width`` in every way a number of items can be counted in it: a
    tool name of ``width`` characters, and in its arguments (a mapping) ``width`` top-level arguments, the first added
    one a list of ``width`` objects, the last added one named with ``width`` characters
    (``keys|map('length')|max > 24``) and holding objects and lists nested ``width`` deep (up to ``MAX_DEPTH``:
    ``(arguments|tojson).count('{') > 3``)."""

    def widened(fn: dict[str, Any]) -> dict[str, Any]:
        fn["name"] = _long_name(fn["name"], width)  # ``f.name|length > 40``
        if isinstance(fn["arguments"], dict):
            first = len(fn["arguments"])
            more: dict[str, Any] = {f"option_{i}": f"value {i}" for i in range(first, width)}
            if more:  # a list of objects (todos, edits): its items and their braces count
                more[f"option_{first}"] = [{"item": k} for k in range(width)]
            if len(more) > 1:
                last = f"option_{width - 1}"
                del more[last]
                more[last.ljust(width, "_")] = _nested(min(width, MAX_DEPTH))
            fn["arguments"] = {**fn["arguments"], **more}
        return fn

    return _with_functions(message, widened)


def _nested(depth: int) -> dict[str, Any]:
    """An object holding objects ``depth`` levels deep (itself the first), each in a list of one:
    ``{"level_1": [{"level_2": [... ["leaf"]]}]}`` (as many braces as brackets: ``.count('[') >= 4``)."""
    value: Any = "leaf"
    for level in range(depth, 0, -1):
        value = {f"level_{level}": [value]}
    return dict(value)


def _parallel(messages: list[Message], counts: Sequence[int]) -> list[Message]:
    """``messages`` with its k-th call turn made of ``counts[k]`` parallel calls, followed by their results: the
    first two calls of one tool, each other call of a tool of its own (``calls|map(attribute='function.name')|
    unique|list|length >= 4``). The results name the first call's tool (``_results_named`` gives each its own)."""
    out: list[Message] = []
    turns = iter(counts)
    added: list[str] = []
    for m in messages:
        if m.get("tool_calls"):
            call = m["tool_calls"][0]
            count = next(turns)
            ids = [f"{call['id'][:5]}p{k:03d}" for k in range(1, count)]
            name = call["function"]["name"]
            functions = [
                {**call["function"], "name": name if k == 1 else f"{name}_{k}", "arguments": {"city": f"City {k}"}}
                for k in range(1, count)
            ]
            more = [{**call, "id": i, "function": fn} for i, fn in zip(ids, functions, strict=True)]
            out.append({**m, "tool_calls": [call, *more]})
            added = ids
        elif m["role"] == "tool" and added:
            out.append(m)
            out += [{**m, "tool_call_id": i, "content": f"{m['content']} ({k})"} for k, i in enumerate(added, 1)]
            added = []
        else:
            out.append(m)
    return out


def _rewritten(message: Message, text: Callable[[str, str], str]) -> Message:
    """``message`` with each of its texts (content, reasoning, every string argument of its calls) replaced by
    ``text(old, what)``."""
    out = dict(message)
    for key in ("content", "reasoning_content"):
        if isinstance(out.get(key), str) and out[key]:
            out[key] = text(out[key], "Step" if key == "content" else "Thought")
    if not out.get("tool_calls"):
        return out

    def rewritten(fn: dict[str, Any]) -> dict[str, Any]:
        if isinstance(fn["arguments"], dict):
            fn["arguments"] = {k: text(v, "Arg") if isinstance(v, str) else v for k, v in fn["arguments"].items()}
        return fn

    return _with_functions(out, rewritten)
