"""The conversations the counterexample search draws: a hypothesis strategy over a ``SearchSpace``.

A conversation is a system prompt (or none), then one or two user turns, each followed by one to three tool cycles
(an assistant turn of one to three calls, with or without text next to them, then one result per call), in one
draw of three a long episode after them (``SearchSpace.cycles`` more cycles, fifteen or more, reasoning on every
turn), and an answer. Reasoning, where the template shows it, is on some turns or on every turn. A turn's later
call may repeat its first (a model calling one tool twice alike). Call ids come the ways loops write them
(``ID_STYLES``): counters over the conversation, long ones, none, counters that start again in every turn (the same
id in many turns) and random ones (not in the order of the calls). Results may be answered by their call's id
alone, a call turn's text may come as an assistant message of its own before its calls, arguments may be JSON
strings where the template renders them (the forms the sweeps play once each, drawn with the rest), user turns may
carry a name, answers an empty ``tool_calls``, results may be lists of text parts or JSON objects (these three
where the template renders them), come in the order parallel calls complete or be named as a framework names its
tool class, and a ``developer`` message may follow a user turn where the template names that role. Every
choice is drawn simplest first, so
hypothesis shrinks a counterexample to the fewest messages, calls and arguments, the plainest names and texts, and
the switches unset, that still break the property.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import strategies as st

from tito_audit.audit.search.space import (
    ARGUMENT_KEYS,
    CALL_TEXTS,
    EDGES,
    NAME_SHAPES,
    REASONING,
    SearchSpace,
    after_results,
    answers_with_empty_calls,
    results_as_objects,
    results_as_parts,
)
from tito_audit.rollout.call_arguments import arguments_dict
from tito_audit.scenarios.adapt import arguments_string
from tito_audit.scenarios.searched import Message

UNSET = object()  # a switch left out of the template kwargs
SHORT = 60  # characters a text of a long episode's compact turns keeps
# How loops write call ids: a counter over the conversation (``call00001``), OpenAI's and vLLM's long ones, none,
# a counter that starts again in every turn (``call_0``: the same id in every turn, which a template that looks
# a result's call up by its id, or counts a call's results, reads twice), random ones as Mistral writes them (nine
# letters and digits: not in the order of the calls, which a template that sorts calls by id reorders).
ID_STYLES: tuple[str, ...] = ("short", "long", "none", "per_turn", "random")
_ID_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
# Numbers JSON writes and a template may rewrite: an id past 2**53 (as Discord and X number things; through a float
# it changes), a coordinate of nine decimals (past a rounding), a learning rate below 1e-4 (Python writes "1e-05"),
# a whole float (``21.0``, which a template may write as an int) and a negative zero
NUMBERS: tuple[Any, ...] = (1187460519375704065, 48.858370211, 1e-05, 21.0, -0.0)


Drawn = tuple[tuple[Message, ...], tuple[dict[str, Any], ...], tuple[tuple[str, Any], ...]]


def conversations(space: SearchSpace) -> tuple[st.SearchStrategy[Drawn], Callable[[], None]]:
    """Conversations over ``space`` (see the module docstring), drawn as plain data (messages, tools, kwargs:
    ``Conversation(*drawn)``), and a function that detaches the strategy from everything of this package: what a
    search leaves behind in hypothesis' engine (its cycles, freed by the garbage collector) then holds none of an
    audit's objects."""
    box = [_Strategies(space)]
    strategy = st.composite(lambda draw: box[0].draw(draw))()
    return strategy, box.clear


class _Strategies:
    """Every strategy a conversation is drawn with, built once per space (building one costs hypothesis more than
    drawing from it)."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        edges = st.sampled_from(EDGES)
        cores = st.sampled_from(space.texts)

        def join(a: str, core: str, b: str) -> str:
            return a + core + b

        self.text = st.one_of(st.builds(join, edges, cores, edges), st.just(""))
        self.text_full = st.builds(join, edges, cores, edges)  # never empty
        # no whitespace at its start: the model writes it first in its turn, where whitespace merges with the
        # generation prompt's last token (a seam stop_boundary reports; no canonical sample has it)
        self.answer = st.builds(join, st.just(""), cores, edges)
        # the text of a user turn or a notice appended with results: a text core, short (a template may key a
        # rewrite on what the notice says: a number, a literal it looks for)
        self.notice = st.sampled_from(tuple(dict.fromkeys(t[:SHORT] for t in space.texts)))
        self.reasoning = st.builds(join, edges, st.sampled_from(REASONING), edges)
        scalar = st.one_of(
            self.text,
            st.integers(-5, 10**6),
            st.booleans(),
            st.none(),
            st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda f: round(f, 3)),
            # values arguments often hold that a template may test for: zero, empty containers, a timestamp in
            # milliseconds (past 32 bits)
            st.sampled_from((0, [], {}, 1_767_225_600_000, *NUMBERS)),
        )
        nested = st.one_of(
            st.lists(scalar, min_size=1, max_size=3),
            st.dictionaries(st.sampled_from(ARGUMENT_KEYS), scalar, min_size=1, max_size=3),
        )
        self.value = st.one_of(scalar, nested)
        # tool results are text (what the catalogue's adapters and payload reads take), or only whitespace
        self.result = st.one_of(self.text, st.sampled_from(EDGES[1:]))
        # a user turn's content: text, or a list of text parts (what multimodal clients send)
        parts = self.text_full.map(lambda t: [{"type": "text", "text": t}])
        self.user = st.one_of(self.text_full, parts) if space.parts else self.text_full
        self.name = st.sampled_from(NAME_SHAPES)
        self.calls_per_turn = st.integers(1, 3) if space.parallel else st.just(1)
        # text next to calls: none, the usual one-liners, or any text (a URL, a code block, a long sentence...)
        self.call_text = st.one_of(st.sampled_from((None, "", *CALL_TEXTS)), self.text_full)
        self.id_style = st.sampled_from(ID_STYLES)
        self.switches = [(name, st.sampled_from((UNSET, *values))) for name, values in space.switches]
        # the compact turns a long episode adds (none first: shrinking drops them): one in three draws is long
        self.extra = st.sampled_from((0, 0, space.cycles))

    def calls(self, draw: Any) -> list[dict[str, Any]]:
        """One to three calls (their ids are given when the turn is placed); a later one may repeat the first."""
        calls: list[dict[str, Any]] = []
        for _ in range(draw(self.calls_per_turn)):
            if calls and draw(st.booleans()):  # the same call again (a model asking twice alike)
                calls.append(calls[0])
                continue
            name = draw(self.name)
            n_args = draw(st.integers(0, len(ARGUMENT_KEYS)))
            args = {key: draw(self.value) for key in ARGUMENT_KEYS[:n_args]}
            calls.append(tool_call(name, args))
        return calls

    def call_turn(self, draw: Any, reasoning: bool) -> tuple[Message, list[Any]]:
        """An assistant turn of calls, and the text of each call's result."""
        turn: Message = {"role": "assistant", "content": draw(self.call_text), "tool_calls": self.calls(draw)}
        if reasoning:
            turn["reasoning_content"] = draw(self.reasoning)
            if not self.space.text_with_reasoning:  # the template refuses both on a call turn (gpt-oss's)
                turn["content"] = None
        return turn, [draw(self.result) for _ in turn["tool_calls"]]

    def draw(self, draw: Any) -> Drawn:
        space = self.space
        kwargs = [(name, value) for name, values in self.switches if (value := draw(values)) is not UNSET]
        every_turn = space.reasoning and draw(st.booleans())  # reasoning on every assistant turn of a short episode

        def thinks() -> bool:
            return every_turn or (space.reasoning and draw(st.booleans()))

        messages: list[Message] = []
        if draw(st.booleans()):
            messages.append({"role": "system", "content": draw(self.text_full)})
        counter = [0]
        ids = draw(self.id_style)
        starts: list[int] = []  # where each segment's user message is
        for segment in range(draw(st.integers(1, 2))):
            starts.append(len(messages))
            messages.append({"role": "user", "content": draw(self.user)})
            turns = [self.call_turn(draw, thinks()) for _ in range(draw(st.integers(1, 3)))]
            for turn, results in turns:
                messages += placed(turn, results, counter, ids)
            # A long episode: the first turn, compacted, again and again with reasoning on every turn (drawn after
            # the turns, and always with the same draws, so that shrinking it to none leaves the rest as it was).
            extra, vary, thought = draw(self.extra), draw(st.booleans()), draw(self.reasoning)
            if extra and segment == 0:  # one long episode at most: its renders grow with its square
                compact = _compact(turns[0][0], thought if space.reasoning else None)
                # its results go through the texts (a template that cuts or drops older results past some length,
                # context management, shows it on the long ones)
                results = [[space.texts[k % len(space.texts)][:SHORT]] for k in range(extra)]
                each_turn = _varied(compact, extra) if vary else [compact] * extra
                for each, result in zip(each_turn, results, strict=True):
                    messages += placed(each, result, counter, ids)
            answer: Message = {"role": "assistant", "content": draw(self.answer)}
            if thinks():
                answer["reasoning_content"] = draw(self.reasoning)
            messages.append(answer)
        # Drawn last, so that shrinking the rest never shifts them (and shrinking them to False drops them): two user
        # messages in a row (a follow-up before the model answered) and a system message in the middle (a notice).
        if draw(st.booleans()):
            messages.insert(starts[0] + 1, {"role": "user", "content": draw(self.user)})
            starts = [starts[0], *(k + 1 for k in starts[1:])]
        if len(starts) > 1 and draw(st.booleans()):
            messages.insert(starts[1], {"role": "system", "content": draw(self.text_full)})
        if space.roles and draw(st.booleans()):  # a role beside system the template names (OpenAI's developer)
            # after a user turn: the first (what it shrinks to), or a later one, appended with it after an answer
            users = [i for i, m in enumerate(messages) if m["role"] == "user"]
            at = draw(st.sampled_from(users)) + 1
            messages.insert(at, {"role": draw(st.sampled_from(space.roles)), "content": draw(self.text_full)})
        # Drawn after the rest too (each shrinks to False, which leaves the conversation as it was): the forms loops
        # send that the sweeps play once each, here with whatever else the draw holds: results answered by their
        # call's id alone (OpenAI's format), a call turn's text sent as an assistant message of its own before its
        # calls (two assistant messages in a row), and arguments as JSON strings where the template renders them.
        if draw(st.booleans()):
            messages = by_id_alone(messages)
        if draw(st.booleans()):
            messages = texts_apart(messages)
        if draw(st.booleans()):  # parallel calls' results as they complete, not in the calls' order
            messages = results_out_of_order(messages)
        if draw(st.booleans()):  # results named as a framework names its tool class (``WebSearchTool``)
            messages = results_named_otherwise(messages)
        if space.string_arguments and draw(st.booleans()):
            messages = arguments_string(messages)
        if space.after_results and draw(st.booleans()):  # a user turn or a notice right after a call turn's results
            messages = after_results(messages, draw(st.sampled_from(space.after_results)), draw(self.notice))
        # ... and what some clients add: a user's name (OpenAI's ``name``), an answer's empty ``tool_calls`` (as vLLM
        # and some SDKs send a turn without calls), results as lists of text parts or as objects (a tool's structured
        # output); the last three where the template renders them
        if draw(st.booleans()):
            messages = [{**m, "name": "ana"} if m["role"] == "user" else m for m in messages]
        if space.empty_calls and draw(st.booleans()):
            messages = answers_with_empty_calls(messages)
        if space.result_parts and draw(st.booleans()):
            messages = results_as_parts(messages)
        elif space.result_objects and draw(st.booleans()):
            messages = results_as_objects(messages)
        for key, roles in space.fields:  # the other keys the template renders, on some messages of their roles
            for i, m in enumerate(messages):
                if m["role"] in roles and draw(st.booleans()):
                    messages[i] = {**m, key: draw(self.text_full)}
        return tuple(messages), declarations(messages), tuple(kwargs)


def by_id_alone(messages: list[Message]) -> list[Message]:
    """Every result that has its call's id without its tool's name, as OpenAI's format answers a call."""
    return [{k: v for k, v in m.items() if k != "name"} if m.get("tool_call_id") else m for m in messages]


def results_out_of_order(messages: list[Message]) -> list[Message]:
    """Every run of results (a parallel turn's) in the reverse order of its calls, as they complete."""
    out: list[Message] = []
    for m in messages:
        run = len(out) - next((i for i, o in enumerate(reversed(out)) if o["role"] != "tool"), len(out))
        if m["role"] == "tool" and run < len(out):
            out.insert(run, m)  # before the results already placed: the run ends reversed
        else:
            out.append(m)
    return out


def results_named_otherwise(messages: list[Message]) -> list[Message]:
    """Every result's ``name`` other than its call's: the tool class a framework names it by (``get_weather``:
    ``GetWeatherTool``)."""
    return [
        {**m, "name": "".join(p[:1].upper() + p[1:] for p in re.split(r"[\W_]+", m["name"]) if p) + "Tool"}
        if m["role"] == "tool" and isinstance(m.get("name"), str)
        else m
        for m in messages
    ]


def texts_apart(messages: list[Message], turns: int = 2) -> list[Message]:
    """The first ``turns`` call turns with text as two assistant messages each: the text (and the turn's reasoning),
    then the calls, as a loop writes them that lets the model go on after it stopped, or keeps a text and its calls
    apart. Two are enough to put one in history; every turn of a long episode split made it a third longer, and its
    renders spent the search's share of the characters after twenty conversations on a ChatML tool template."""
    out: list[Message] = []
    split = 0
    for m in messages:
        text = m.get("content")
        with_text = isinstance(text, str) and bool(text.strip())
        if split < turns and m["role"] == "assistant" and m.get("tool_calls") and with_text:
            split += 1
            said = {k: v for k, v in m.items() if k != "tool_calls"}
            out += [said, {k: v for k, v in m.items() if k != "reasoning_content"} | {"content": None}]
        else:
            out.append(m)
    return out


# The values a long episode's turns give one argument in turn: every JSON type at its edges, and the strings tools
# are given that a template may test (Windows line ends, JSON held in a string, code of many lines).
SWEEP: tuple[Any, ...] = (
    0,
    [],
    {},
    -3,
    2.5,
    None,
    False,
    True,
    1_767_225_600_000,
    "a\r\nb",
    '{"k": [1]}',
    ["Paris", "Paris", "Lyon"],  # a list with an item twice (tags, ids): a template may drop repeats
    [{"id": 1, "done": False}, {"id": 2, "done": True}],  # a batch of records (red team 44: the first one kept)
    "".join(f"line {i}\n" for i in range(1, 21)),
    *NUMBERS,
)


def _compact(turn: Message, reasoning: str | None) -> Message:
    """``turn`` with its first call alone, of its first two arguments (texts cut to ``SHORT`` characters, objects
    and lists left out), and ``reasoning`` (a long episode's turn: its length and its reasoning on every turn are
    what it tests, and fifteen copies of a long argument would spend the template's budget on length alone)."""
    call = turn["tool_calls"][0]
    fn = call["function"]
    args = {
        k: v[:SHORT] if isinstance(v, str) else v
        for k, v in list(fn["arguments"].items())[:2]
        if not isinstance(v, dict | list)
    }
    out: Message = {**turn, "tool_calls": [{**call, "function": {**fn, "arguments": args}}]}
    out.pop("reasoning_content", None)
    if reasoning is not None:
        out["reasoning_content"] = reasoning
    return out


def _varied(turn: Message, cycles: int) -> list[Message]:
    """``cycles`` copies of ``turn`` that go through the name shapes, the texts next to calls, the whitespace at
    reasoning's edges and the values an argument may hold (``SWEEP``), one step per turn (a long episode that covers
    them all without drawing each)."""
    out = []
    for k in range(cycles):
        call = turn["tool_calls"][0]
        args = {**call["function"]["arguments"], "value": SWEEP[k % len(SWEEP)]}
        fn = {**call["function"], "name": NAME_SHAPES[k % len(NAME_SHAPES)], "arguments": args}
        varied: Message = {**turn, "content": (None, *CALL_TEXTS)[k % 3], "tool_calls": [{**call, "function": fn}]}
        if turn.get("reasoning_content"):
            edge = EDGES[k % len(EDGES)]
            varied["reasoning_content"] = edge + turn["reasoning_content"].strip() + edge
        out.append(varied)
    return out


def placed(
    turn: Message,
    results: list[Any],
    counter: list[int],
    ids: str | Sequence[str] = "short",
    named: bool = True,
    extra: dict[str, Any] | None = None,
) -> list[Message]:
    """``turn`` with fresh call ids (``ids``: one of ``ID_STYLES``, ``none`` for calls and results without ids, or
    the ids themselves, one per call), and its results, each with its tool's name unless ``named`` is False (as
    OpenAI's format has it: the call's id alone), and the keys of ``extra``."""
    calls = []
    for j, call in enumerate(turn["tool_calls"]):
        counter[0] += 1
        if ids == "none":
            calls.append(dict(call))
        else:
            calls.append({"id": call_id(ids, counter[0], j) if isinstance(ids, str) else ids[j], **call})
    out: list[Message] = [{**turn, "tool_calls": calls}]
    for call, text in zip(calls, results, strict=True):
        result: Message = {"role": "tool", "name": call["function"]["name"], "content": text}
        if not named:
            del result["name"]
        result.update(extra or {})
        if "id" in call:
            result = {"role": "tool", "tool_call_id": call["id"], **{k: v for k, v in result.items() if k != "role"}}
        out.append(result)
    return out


def call_id(style: str, n: int, j: int) -> str:
    """The id of the ``n``-th call of a conversation, the ``j``-th of its turn, in ``style`` (``ID_STYLES``)."""
    if style == "short":
        return f"call{n:05d}"
    if style == "long":
        return f"call_{n:024d}"
    if style == "per_turn":
        return f"call_{j}"
    digest = hashlib.blake2b(n.to_bytes(8, "big"), digest_size=9).digest()
    return "".join(_ID_LETTERS[b % len(_ID_LETTERS)] for b in digest)


def declarations(messages: list[Message]) -> tuple[dict[str, Any], ...]:
    """A tool declaration for every name called, with the arguments it is called with (as a tool set would)."""
    params: dict[str, dict[str, Any]] = {}
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call["function"]
            props = params.setdefault(fn["name"], {})
            for key, value in (arguments_dict(fn["arguments"]) or {}).items():  # a JSON string too
                props.setdefault(key, {"type": _json_type(value)})
    return tuple(
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"The {name} tool.",
                "parameters": {"type": "object", "properties": props, "required": list(props)[:1]},
            },
        }
        for name, props in params.items()
    )


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if value is None:
        return "null"
    return "string"


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    """A call of ``name`` with ``arguments`` (a dict, or a string as a client sends one), in OpenAI's format: what
    every conversation of the search calls with."""
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def sweep_turn(space: SearchSpace, content: str | None, *calls: dict[str, Any], k: int = 0) -> Message:
    """An assistant turn of the sweeps: ``content``, its ``calls`` if any, and the ``k``-th reasoning where the
    template shows reasoning."""
    turn: Message = {"role": "assistant", "content": content}
    if calls:
        turn["tool_calls"] = list(calls)
    if space.reasoning:
        turn["reasoning_content"] = REASONING[k % len(REASONING)]
        if calls and not space.text_with_reasoning:  # the template refuses both on a call turn (gpt-oss's)
            turn["content"] = None
    return turn
