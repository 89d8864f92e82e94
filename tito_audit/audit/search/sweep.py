"""The search's first conversations: long episodes that go through everything the space holds, step by step.

A rewrite keyed on one value (an MCP tool name, an empty list argument, a zero, a Windows line end in a tool result,
a call written as text) breaks on the first conversation that holds that value where history is rewritten. Drawn at
random, forty conversations may all miss it. So before the draws, the search plays conversations built from the
space itself (``sweeps``). One of values (``sweep``): a tool cycle for each step, each call named with the next name
shape, given the next argument value (``conversations.SWEEP``) and the next two text cores as arguments, with the next
text next to it, and answered with the next text core, reasoning on every turn where the template shows it, then
the answer, a user turn and another answer (every turn then history before the last user message). One of
texts and shapes (``sweep_texts``): each text core, whole (``TEXT_CHARS``), next to a call, and a second system
message, two user turns in a row, calls without ids. Where one breaks, it is shrunk by hand as hypothesis would
(``shrink.shrunk``): each tool cycle dropped, then each turn's reasoning, the text next to its call and each argument,
while the break remains. Each counts as one of the budget's conversations; the draws follow where none breaks.
The sweep of values names the result of each name shape's first call (a template may read a result's name as well
as a call's), answers every other call after them as OpenAI's format does, by its id alone (no ``name``), and gives
every third result a key a framework adds (``status``, as LangChain's ``ToolMessage`` has it); the sweep of texts
answers every fourth call with neither an id nor a name, and appends with the first results a user turn, a notice
and a developer message where the template renders them there.

A third (``sweep_ids``) plays the shapes of calls no value holds: a turn of parallel calls whose ids are not in
the order of the calls, whose second repeats the first and whose fourth calls the first's tool again after
another's (a template that groups earlier calls by tool reorders it), then turns whose ids start again at
``call_0`` (the same id in many turns, each time another tool's), then ids as Anthropic and Kimi write them
(``toolu_...``, ``functions.get_weather:0``), then a second user turn. A template that looks a result's call up by
its id, counts a call's results, sorts calls by id or drops repeated calls breaks on it where it does so for
earlier turns only.

A fourth (``sweep_turns``) plays two assistant messages in a row, as loops write them: a text alone and then the
call (a loop that lets the model go on after it stopped, or keeps a text and a call apart), the text each time with
other whitespace at its end and on one line or two; four in a row (a text ending with ':', the space's longest
text, another, then a turn of two calls with an empty text); an answer and then another that goes on from it; a call
with text (its arguments a JSON string where the template renders one) and then another call, their results after
both (parallel calls split into messages). The buffer appends
the generation prompt alone between them (``Trajectory.append_messages([])``). A template that rewrites the first
of the two once the second follows (drops, trims or cuts its text, drops its reasoning or calls, writes another turn
end) breaks on it; one that refuses two assistant messages in a row refuses this conversation only.

A fifth (``sweep_answers``) plays each text core as an answer and then as the user turn after one: a tool cycle,
then an exchange of an answer and a user turn per core. Each answer is rendered as the last message without a
generation prompt (the episode as it ends there: a model that answers without a call ends its rollout; the render
that gives the simulator its sampled turn), and the loop appends each user turn with the generation prompt. A
template that rewrites the history only while the last message is an answer, or a user turn, that says a certain
thing (an error, a refusal) breaks on it; its counterexample keeps the exchanges that break it. Its last user turn
quotes the first line of the answer before it in Markdown (``> ...``), as chat clients quote, appended with a
message of each role beside system the template renders (``SearchSpace.roles``: OpenAI's developer).

A sixth (``sweep_agent``) plays a coding agent's episode as its harness sends it: a system prompt that says what the
model is, tools declared as such harnesses declare them (a shell tool described as one, a file tool whose parameter
is ``file_path``, a tool without a description: ``AGENT_TOOLS``), what those tools return (a Python traceback, a
shell's exit status, a file), a call's text, an answer that asks, a user who says "continue", and one who answers
"yes" to what the agent asked. A template that
rewrites the history where the system prompt, the tools' declarations or such a result say something breaks on it;
its shrink keeps the harness's declarations of the tools still called.

A seventh (``schemas.sweep_schemas``) declares its tools as real tool sets do (enums, defaults, integer and boolean
parameters, a strict tool, keys with a leading underscore or a dot) and calls them as models do, disagreeing with
the declarations: a template that rewrites an earlier call by its tool's schema breaks on it. An eighth
(``forms.sweep_forms``) sends content in the forms clients send and no other conversation does: several text parts,
an image, arguments pretty-printed or cut off, a terminal's and a file's invisible characters. A ninth
(``outputs.sweep_outputs``) returns what tools print, in the formats they print it (a CSV export, a diff, an HTTP
response, a token...), a result a turn, and the words the template compares a whole text with. A tenth
(``repeats.sweep_repeats``) calls a file tool and a shell tool with every key the template reads by name and calls
them again with the same values in later turns, as an agent reads a file again after editing it. An eleventh
(``context.sweep_context``) reads a file of 4,000 characters and then one of 60,000, past what a harness that
compacts its context at some total keys on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

from tito_audit.audit.search.context import sweep_context
from tito_audit.audit.search.conversations import SHORT, SWEEP, declarations, placed, sweep_turn, tool_call
from tito_audit.audit.search.forms import sweep_forms
from tito_audit.audit.search.outputs import sweep_outputs
from tito_audit.audit.search.repeats import sweep_repeats
from tito_audit.audit.search.schemas import sweep_schemas
from tito_audit.audit.search.space import AFTER_RESULTS, CALL_TEXTS, EDGES, LONG, NAME_SHAPES, TEXTS, SearchSpace
from tito_audit.scenarios.searched import Conversation, Message

# A text core of the sweep of texts is played whole up to twice the space's long text: the long ones are there to
# be past the lengths a template tests (a template cutting earlier answers at 240 characters cuts a call's text
# next to it); a template's own longer length is left to the draws.
TEXT_CHARS = 2 * LONG


def sweeps(space: SearchSpace) -> list[Conversation]:
    """The sweep of values (``sweep``), of texts and shapes (``sweep_texts``), of call ids (``sweep_ids``), of
    assistant turns in a row (``sweep_turns``), of answers and user turns (``sweep_answers``), a coding agent's
    episode (``sweep_agent``), calls that disagree with their tools' schemas (``schemas.sweep_schemas``), content in
    the forms clients send (``forms.sweep_forms``), what tools print (``outputs.sweep_outputs``), values that come
    back in later calls (``repeats.sweep_repeats``), then a large context (``context.sweep_context``): ``_SWEEPS``,
    in order."""
    return [build(space) for _, build in _SWEEPS]


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    """A call of ``name`` with ``arguments`` (the ids, turns, answers and agent sweeps' calls)."""
    return tool_call(name, arguments)


def sweep_texts(space: SearchSpace) -> Conversation:
    """A tool cycle for each text core, written next to the call and returned as its result, in a conversation of
    the shapes loops send beside the catalogue's: a system prompt (with the literals the template looks for in
    text, ``SearchSpace.system``), a second system message in its middle (a
    reminder, as coding agents inject), two user turns in a row, calls without ids, and after the first cycles'
    results each message a loop may append with them that the template renders there (``after_results``: a user
    turn, a notice, a developer message). A template that refuses one of them refuses this conversation only."""
    texts = [t[:TEXT_CHARS] for t in space.texts]
    messages: list[Message] = [
        {"role": "system", "content": space.system},
        {"role": "user", "content": "What's the weather in Paris?"},
    ]
    counter = [0]
    for k, text in enumerate(texts):
        if k == len(texts) // 2:
            messages += [
                {"role": "system", "content": "Reminder: keep answers short."},
                {"role": "user", "content": "And tomorrow?"},
                {"role": "user", "content": "Also Lyon."},
            ]
        # each call named with the next name shape: every text core, as a result, is in one episode with every name
        # shape (a rewrite keyed on both, a dotted name and a number returned, meets them together)
        turn = sweep_turn(space, text, _call(NAME_SHAPES[k % len(NAME_SHAPES)], city="Paris"), k=k)
        # calls without ids every other cycle, and every fourth result with neither an id nor a name
        messages += placed(turn, [texts[(k + 1) % len(texts)]], counter, "none" if k % 2 else "short", k % 4 != 3)
        if k < len(space.after_results):  # appended with this cycle's result, before the model answers
            messages.append({"role": space.after_results[k], "content": "Reminder: keep answers short."})
    messages.append({"role": "assistant", "content": "It is sunny in Paris."})
    return Conversation(tuple(messages), declarations(messages), ())


def sweep(space: SearchSpace) -> Conversation:
    """The sweep conversation over ``space`` (see the module docstring)."""
    texts = [t[:SHORT] for t in space.texts]
    # two text cores a call (as its city and its query), so that every core is an argument within the names' and
    # values' cycles: a cycle per core made this sweep quadratic in the cores (each render holds every cycle before)
    steps = max(len(NAME_SHAPES), len(SWEEP), -(-len(texts) // 2))
    messages: list[Message] = [{"role": "user", "content": "What's the weather in Paris?"}]
    counter = [0]
    for k in range(steps):
        city, query = texts[2 * k % len(texts)], texts[(2 * k + 1) % len(texts)]
        args = {"city": city, "value": SWEEP[k % len(SWEEP)], "query": query}
        call = tool_call(NAME_SHAPES[k % len(NAME_SHAPES)], args)
        turn = sweep_turn(space, (None, *CALL_TEXTS)[k % 3], call, k=k)
        extra = {"status": "success"} if k % 3 == 2 else None  # a key a framework adds (LangChain's ToolMessage)
        # each name shape's first result carries its name (a template may read a result's name as well as a call's);
        # past them every other result is answered by its call's id alone (OpenAI's format)
        named = k < len(NAME_SHAPES) or k % 2 == 0
        messages += placed(turn, [texts[(k + 1) % len(texts)]], counter, named=named, extra=extra)
    # then the user speaks again: every turn before is history before the last user message, which templates
    # rewrite apart from the turns after it (Qwen3's reasoning, names mapped for an API)
    messages += [
        sweep_turn(space, "It is sunny in Paris."),
        {"role": "user", "content": "Thanks. And tomorrow?"},
        sweep_turn(space, "Rain tomorrow.", k=1),
    ]
    return Conversation(tuple(messages), declarations(messages), ())


# Ids as Mistral writes them (nine letters and digits), not in the order of the calls: sorting them reorders the calls
_UNORDERED_IDS = ("q7Rm4Wc1N", "Ka83vNq0x", "b2Xk9Qp5L", "Zt51pQ8mE")
# Ids as other vendors' APIs write them: Anthropic's ``toolu_`` ones, and Kimi's ``functions.NAME:INDEX``
_VENDOR_IDS = ("toolu_01A09q90qw90lq917835lq9", "functions.get_weather:0")


def sweep_ids(space: SearchSpace) -> Conversation:
    """The sweep of call ids and repeated calls (see the module docstring): without parallel calls where the
    template refuses them (``SearchSpace.parallel``), its ids then only start again."""

    counter = [0]

    def cycle(calls: list[dict[str, Any]], ids: list[str], k: int) -> list[Message]:
        results = [f"Result {k}.{j}." for j in range(len(calls))]
        return placed(sweep_turn(space, None, *calls, k=k), results, counter, ids)

    # the second repeats the first, and the fourth calls the first's tool again after another's (red team 28: calls
    # grouped by tool in earlier turns)
    first = [
        _call("get_weather", city="Paris"),
        _call("get_weather", city="Paris"),
        _call("get_forecast", city="Lyon"),
        _call("get_weather", city="Nice"),
    ]
    if not space.parallel:
        first = first[:1]
    messages: list[Message] = [
        {"role": "user", "content": "What's the weather in Paris and Lyon?"},
        *cycle(first, list(_UNORDERED_IDS[: len(first)]), 0),
        *cycle([_call("get_weather", city="Lyon")], ["call_0"], 1),
        *cycle([_call("get_time", city="Lyon")], ["call_0"], 2),
        *cycle([_call("get_forecast", city="Paris")], [_VENDOR_IDS[0]], 3),
        *cycle([_call("get_weather", city="Paris")], [_VENDOR_IDS[1]], 4),
        {"role": "assistant", "content": "Paris is sunny; Lyon is cloudy."},
        {"role": "user", "content": "And tomorrow?"},
        *cycle([_call("get_forecast", city="Paris")], ["call_0"], 5),
    ]
    messages.append(sweep_turn(space, "Rain tomorrow."))
    return Conversation(tuple(messages), declarations(messages), ())


def sweep_turns(space: SearchSpace) -> Conversation:
    """The sweep of assistant turns in a row (see the module docstring), reasoning on every turn where the template
    shows it."""

    said = partial(sweep_turn, space)
    counter = [0]
    messages: list[Message] = [{"role": "user", "content": "What's the weather in Paris?"}]
    # a text alone, then the call: other whitespace at the text's end each time (not at its start, which a
    # tokenizer may join with the generation prompt's last line end into one token: a turn no comparison can judge,
    # and with it the whole conversation)
    for k, edge in enumerate(EDGES[1:]):
        text = f"{CALL_TEXTS[k % len(CALL_TEXTS)]}{edge}"
        messages += [
            said(text, k=k),
            *placed(said(None, _call("get_weather", city="Paris"), k=k + 1), [TEXTS[1]], counter),
        ]
    # four in a row: a text ending with ':', the space's longest text, another text, then a turn of two calls (where
    # the template renders parallel ones) with an empty text, as OpenAI's format writes a call turn's content
    calls = [_call("get_weather", city="Paris"), _call("get_time", city="Paris")][: 2 if space.parallel else 1]
    messages += [
        said("Two things to check:", k=0),
        said(max(space.texts, key=len), k=1),
        said("Checking both now.", k=0),
        *placed(said("", *calls, k=0), [TEXTS[1], "10:42"][: len(calls)], counter),
    ]
    messages += [
        said("Here is what I found:\n", k=0),  # an answer, then another that goes on from it
        said("Here is what I found:\nIt is sunny in Paris.", k=1),
        {"role": "user", "content": "And the time in Lyon?"},
    ]
    # a call with text, then another call: their results after both; the first call's arguments a JSON string, as
    # OpenAI's format sends them, where the template renders one
    lyon = _call("get_weather", city="Lyon")
    if space.string_arguments:
        lyon["function"]["arguments"] = json.dumps(lyon["function"]["arguments"])
    first = placed(said("Checking Lyon.", lyon, k=0), ["Cloudy."], counter)
    second = placed(said(None, _call("get_time", city="Lyon"), k=1), ["10:42"], counter)
    messages += [first[0], second[0], first[1], second[1], said("Cloudy, and it is 10:42 in Lyon.", k=0)]
    return Conversation(tuple(messages), declarations(messages), ())


def sweep_answers(space: SearchSpace) -> Conversation:
    """The sweep of answers and user turns (see the module docstring): a tool cycle, then each text core, whole, as
    an answer and then as the user turn that follows one, reasoning on every turn where the template shows it."""
    texts = [t[:TEXT_CHARS] for t in space.texts]
    messages: list[Message] = [
        {"role": "user", "content": "What's the weather in Paris?"},
        *placed(sweep_turn(space, None, _call("get_weather", city="Paris")), [TEXTS[1]], [0]),
    ]
    for k, text in enumerate(texts):
        messages += [sweep_turn(space, text, k=k), {"role": "user", "content": texts[(k + 1) % len(texts)]}]
    # an answer of two lines, then a user who quotes its first in Markdown, as chat clients quote (red team 62: a
    # template that cuts an earlier answer to the line a later user turn quotes), appended with a message of each
    # role beside system the template renders (OpenAI's developer: red team 18's e4, a rewrite while one follows a
    # later user turn)
    messages += [
        sweep_turn(space, QUOTED_ANSWER, k=0),
        {"role": "user", "content": f"> {QUOTED_ANSWER.splitlines()[0]}\n\nWhere do I change it?"},
        *({"role": role, "content": AFTER_RESULTS["system"]} for role in space.roles),
    ]
    messages.append(sweep_turn(space, "It is sunny in Paris.", k=1))
    return Conversation(tuple(messages), declarations(messages), ())


QUOTED_ANSWER = "The default timeout is 30 seconds.\nIt can be raised in config.toml."


# A coding agent's harness, as such loops declare it: a system prompt that says what the model is, a shell tool
# described as one, a file tool whose parameter is a path, a tool declared without a description
AGENT_SYSTEM = (
    "You are an autonomous coding agent working in the user's repository. Use the tools to run commands, read "
    "files and fix what fails; keep going until the task is done."
)
AGENT_TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command in a bash shell and return its output and exit code.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["file_path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "todo_write",
            "parameters": {"type": "object", "properties": {"todos": {"type": "array"}}, "required": ["todos"]},
        },
    },
)
# what a coding agent's tools return: a Python traceback, a shell's exit status as Codex CLI reports it, a file
_TRACEBACK = (
    'Traceback (most recent call last):\n  File "tests/test_app.py", line 3, in <module>\n    from app import main\n'
    "ModuleNotFoundError: No module named 'app'\n"
)
_EXIT = "Exit code: 1\nWall time: 0.4 seconds\nOutput:\nFAILED tests/test_app.py::test_main - ZeroDivisionError\n"
_SOURCE = "def main():\n    return 1 / 0\n"


def sweep_agent(space: SearchSpace) -> Conversation:
    """The sweep of a coding agent's episode (see the module docstring): a harness's system prompt and tools
    (``AGENT_TOOLS``), what shell and file tools return, a user who says "continue", then "yes"."""

    counter = [0]
    said = partial(sweep_turn, space)
    messages: list[Message] = [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user", "content": "The tests fail in this repo. Fix them."},
        *placed(said(None, _call("bash", command="python -m pytest -q"), k=0), [_TRACEBACK], counter),
        *placed(said("Let me look at the code.", _call("read_file", file_path="src/app.py"), k=1), [_SOURCE], counter),
        *placed(said(None, _call("bash", command="pytest -q tests/test_app.py"), k=0), [_EXIT], counter),
        *placed(said(None, _call("todo_write", todos=["fix the import", "fix main"]), k=1), ["ok"], counter),
        said("The import path was wrong and main divided by zero; both are fixed. Run the linter too?", k=0),
        {"role": "user", "content": "continue"},
        *placed(said(None, _call("bash", command="ruff check ."), k=1), ["All checks passed!"], counter),
        said("The tests pass and the linter is clean. Shall I commit?", k=0),
        # a user who approves what the agent asked for
        {"role": "user", "content": "yes"},
        *placed(
            said(None, _call("bash", command="git commit -am 'Fix tests'"), k=1), ["[main 1a2b3c4] Fix tests"], counter
        ),
        said("Committed.", k=0),
    ]
    return Conversation(tuple(messages), AGENT_TOOLS, ())


# Every sweep, by the name the report gives one it could not judge (``search:unjudged:NAME``), in the order played
_SWEEPS: tuple[tuple[str, Callable[[SearchSpace], Conversation]], ...] = (
    ("values", sweep),
    ("texts", sweep_texts),
    ("ids", sweep_ids),
    ("turns", sweep_turns),
    ("answers", sweep_answers),
    ("agent", sweep_agent),
    ("schemas", sweep_schemas),
    ("forms", sweep_forms),
    ("outputs", sweep_outputs),
    ("repeats", sweep_repeats),
    ("context", sweep_context),
)
SWEEP_NAMES = tuple(name for name, _ in _SWEEPS)


def like_sweep(messages: list[Message], like: Conversation) -> Conversation:
    """``messages`` as a conversation of ``like``'s: each tool called declared as ``declarations`` would, or as
    ``like`` declared it where that is not what ``declarations`` derives from ``like``'s own messages (a harness's,
    ``sweep_agent``'s)."""
    derived = {t["function"]["name"]: t for t in declarations(list(like.messages))}
    own = {t["function"]["name"]: t for t in like.tools if t != derived.get(t["function"]["name"])}
    return Conversation(
        tuple(messages), tuple(own.get(t["function"]["name"], t) for t in declarations(messages)), like.kwargs
    )
