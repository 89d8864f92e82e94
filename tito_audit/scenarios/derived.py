"""Scenarios derived from what a template's code reads, played beside the catalogue's (``AuditContext.scenarios``).

The catalogue (``catalog``) plays fixed conversations; these are built from the template's own readings
(``scenarios.reasoning``, ``scenarios.reach``): empty reasoning where reasoning renders, each message key it
renders, and conversations past the lengths, counts and literals it tests (long episodes, long texts, rewrite
literals, wide calls, parallel calls).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tito_audit.scenarios.catalog import SHAPES, build_messages, in_modes
from tito_audit.scenarios.reach import MAX_PARALLEL, Reach, long_text, with_literals
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
      template tests (``messages|length > 9``, ``loop.index``, a counter);
    - ``long_text/N`` (``reach.length``): a follow-up episode whose every text (user, arguments, tool output,
      answer, reasoning) holds N characters, past the text lengths it tests or cuts (``|length > 300``, ``[:300]``);
    - ``literals/plain`` (``reach.literals``): a follow-up episode with the literals it rewrites text with in every
      text (``'\\n'`` in tool-call arguments);
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
        out += in_modes(spec, build_messages(spec, special_texts), ({},))
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
    return out


def wide_scenarios(reach: Reach, special_texts: Sequence[str] = ()) -> list[Scenario]:
    """Played after every other scenario (``AuditContext.scenarios``), so that a check that reads only the first
    episodes fit for it (``continuation`` in the quick set) keeps the ones it had:

    - ``wide/N`` (``reach.widths``): tool cycles whose calls carry those numbers of top-level arguments (up to N),
      the first added one a list of as many items, at and past the numbers the template tests a length with that
      may count items (``arguments|length >= 12``, ``keys[11:12]``), then a follow-up;
    - ``parallel/N``: the widths between the catalogue's three parallel calls and ``MAX_PARALLEL``, each a turn of
      that many parallel calls and their results, then a follow-up (apart from ``wide``: a template that cannot
      show parallel calls still has its wide calls played)."""
    widths = reach.widths
    if not widths:
        return []
    steps = ("user", *("call", "tool") * len(widths), "final", "user", "final")
    desc = f"calls with {', '.join(map(str, widths))} top-level arguments, then a follow-up"
    spec = ScenarioSpec(f"wide/{widths[-1]}", steps, "plain", desc, frozenset({"derived"}))
    calls = iter(widths)
    messages = [_widened(m, next(calls)) if m.get("tool_calls") else m for m in build_messages(spec, special_texts)]
    out = in_modes(spec, messages, ({},))
    parallel = [w for w in widths if 3 < w <= MAX_PARALLEL][-2:]
    if parallel:
        steps = ("user", *("call", "tool") * len(parallel), "final", "user", "final")
        desc = f"turns of {', '.join(map(str, parallel))} parallel calls, then a follow-up"
        spec = ScenarioSpec(f"parallel/{parallel[-1]}", steps, "plain", desc, frozenset({"derived"}))
        out += in_modes(spec, _parallel(build_messages(spec, special_texts), parallel), ({},))
    return out


def _widened(message: Message, width: int) -> Message:
    """``message`` with each of its calls' arguments (a mapping) grown to ``width`` top-level arguments, the first
    added one a list of ``width`` items."""
    calls = []
    for call in message["tool_calls"]:
        fn = dict(call["function"])
        if isinstance(fn["arguments"], dict):
            first = len(fn["arguments"])
            more: dict[str, Any] = {f"option_{i}": f"value {i}" for i in range(first, width)}
            if more:
                more[f"option_{first}"] = [f"item {k}" for k in range(width)]
            fn["arguments"] = {**fn["arguments"], **more}
        calls.append({**call, "function": fn})
    return {**message, "tool_calls": calls}


def _parallel(messages: list[Message], counts: Sequence[int]) -> list[Message]:
    """``messages`` with its k-th call turn made of ``counts[k]`` parallel calls, followed by their results."""
    out: list[Message] = []
    turns = iter(counts)
    added: list[str] = []
    for m in messages:
        if m.get("tool_calls"):
            call = m["tool_calls"][0]
            count = next(turns)
            ids = [f"{call['id'][:5]}p{k:03d}" for k in range(1, count)]
            more = [
                {**call, "id": i, "function": {**call["function"], "arguments": {"city": f"City {k}"}}}
                for k, i in enumerate(ids, 1)
            ]
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
    if out.get("tool_calls"):
        calls = []
        for call in out["tool_calls"]:
            fn = dict(call["function"])
            if isinstance(fn["arguments"], dict):
                fn["arguments"] = {k: text(v, "Arg") if isinstance(v, str) else v for k, v in fn["arguments"].items()}
            calls.append({**call, "function": fn})
        out["tool_calls"] = calls
    return out
