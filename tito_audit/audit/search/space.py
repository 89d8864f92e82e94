"""What the counterexample search varies, derived from the template: the space of conversations it draws from.

The fixed part is what real agent traffic sends (``NAME_SHAPES``, ``ARGUMENT_KEYS``, ``TEXTS``, ``EDGES``): tool
names in every common shape, calls of zero to ten top-level arguments with nested objects and arrays (and zero,
empty containers, a millisecond timestamp), text with quotes, newlines, backslashes, non-ASCII characters, Windows
line ends, ANSI colours, a zero-width space, a call written as text, a number, an email address, with whitespace at
its edges, empty, only whitespace (a tool result), long (in many lines, or in one). The part read from the template
(``SearchSpace.of``): whether reasoning reaches its render (then every assistant turn may carry it, and a long
episode carries it on every turn), the other message keys it renders (``Reasoning.fields``), the literals it
rewrites or looks for in text and texts past the lengths it tests (``scenarios.reach``: control-token texts are
never written, ``special_token_injection`` judges them), episodes past the conversation lengths it tests, and the
values of its switches (``scenarios.switches``). A long episode's turns go through the name shapes, the texts and
the argument values of ``conversations.SWEEP`` one step a turn, so that a value a template keys a rewrite on is met
without being drawn. Each list is ordered simplest first: the search shrinks a counterexample towards the first
entries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from tito_audit.audit.other_roles import other_roles, renders
from tito_audit.rendering.analysis import message_reads, template_compared_literals, template_read_keys
from tito_audit.scenarios.reach import long_line, long_text
from tito_audit.scenarios.spec import Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

# Tool names in the shapes real tool sets use: snake_case first (what the catalogue plays), then camelCase,
# PascalCase, MCP-style dotted, dashed, upper case, non-ASCII, namespaced by "__", ":" or "/", with digits.
NAME_SHAPES: tuple[str, ...] = (
    "get_weather",
    "getWeather",
    "GetWeather",
    "mcp.weather.get_forecast",
    "get-weather",
    "GET_WEATHER",
    "météo_du_jour",
    "天気を取得",
    "search_knowledge_base_documents",  # long: past a length a template may cut names at
    "mcp__github__create_issue",  # MCP as coding agents name its tools: server and tool joined by "__"
    "weather:get_forecast",  # a server's namespace joined by ":"
    "files/read_file",  # ... or by "/"
    "s3_list_buckets_v2",  # digits: a service's name, a version (red team 25)
)
# Top-level argument names, in the order a call takes them (a call of n arguments has the first n).
ARGUMENT_KEYS: tuple[str, ...] = (
    "city",
    "unit",
    "days",
    "include_hourly",
    "lang",
    "filters",
    "maxResults",
    "query",
    "sort-order",
    "offset",
    "API_KEY",
)
# Text cores: plain first, then quotes, newlines, a backslash, non-ASCII, JSON in a string, code, a URL, a code
# fence, an emoji, errors a tool returns, a sentence of about a hundred characters, and tool output's own shapes.
TEXTS: tuple[str, ...] = (
    "Paris",
    "Sunny, 21 C.",
    'He said "hi" and left.',
    "it's fine",
    "line one\nline two",
    "東京 — café 🌴",
    "C:\\temp\\new",
    '{"k": [1, 2], "ok": true}',
    "def f(x):\n    return x  # done\n",
    "See https://example.com/docs?id=7&lang=en.",
    "Here it is:\n```python\nprint(1)\n```",
    "On it ☀️",
    "Error: city not found",
    "error: connection timed out (retrying)",  # ... and as command-line tools and loggers write one, lower case
    "The forecast for the next three days shows light rain in the morning and clear skies after noon.",
    # what shell and file tools return and code arguments hold: Windows line ends, ANSI colours, a zero-width space,
    # a function of many lines; and a call written as text (a model reasoning about it, or a call its parser missed)
    "ok\r\ndone\r\n",
    "\x1b[32mPASSED\x1b[0m 3 tests",
    "zero\u200bwidth",
    "".join(f"line {i}: x = {i}\n" for i in range(1, 21)),
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    # what tools return that a template may read and write otherwise: a number as text (a zip code's leading zero,
    # a price's trailing one, a sign), a JSON boolean, an ISO timestamp, an email address, a base64 blob, a progress
    # line's carriage returns, Unicode spaces (a narrow and a no-break one), a Markdown table, HTML with an entity,
    # an XML declaration
    "02134",
    "19.90",
    "-7",
    "true",
    "2024-05-01T12:34:56Z",
    "Write to ana@example.com for access.",
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "Downloading 10%\r55%\r100%",
    "10:30\u202fAM in Tokyo\u00a0(JST)",
    "| city | temp |\n| --- | --- |\n| Paris | 21 |",
    "Q&amp;A: <b>Python</b> tips",
    '<?xml version="1.0"?><rss><item>Sunny</item></rss>',
)
EDGES: tuple[str, ...] = ("", " ", "\n", "\n\n", "\t", "  \n")  # whitespace at the start or end of a text
CALL_TEXTS: tuple[str, ...] = ("I'll check the weather.", "Let me look that up.\nOne moment.")  # text next to calls
REASONING: tuple[str, ...] = ("The user wants the weather, so I call the tool.", "Check the forecast first.")
SYSTEM = "You are a helpful assistant."  # the sweeps' system prompt (``SearchSpace.system``)
LONG = 2_000  # characters of the long text every space has (past a template's own tests: ``lengths``)
MAX_CYCLES = 24  # tool cycles of the longest episode drawn
# a template testing the type of a message's content (``message.content is string``, ``m['content'] is iterable``)
_TYPE_TEST = re.compile(r"content['\"]?\]?\s*(?:\|\s*\w+\s*)?\bis\s+(?:not\s+)?(?:string|iterable|mapping|sequence)\b")


@dataclass(frozen=True)
class SearchSpace:
    """What a conversation may hold for this template (see the module docstring). ``texts``: text cores, simplest
    first (the fixed ones, the literals the template rewrites or looks for, long texts); ``reasoning``: reasoning
    reaches the render; ``fields``: other message keys it renders, with the roles it renders each for; ``cycles``:
    the tool cycles of a long episode; ``switches``: each switch's played values (``kwargs`` are drawn from them,
    unset first); ``parts``: a user turn may send its text as a list of text parts, where the template tests the
    type of a message's content (``content is string``...; elsewhere a template that concatenates content refuses
    parts); ``parallel``: a call turn may carry several calls, unless the template refused every catalogue scenario
    that has some (it raises for them: every draw with one would be refused, and the budget spent on nothing);
    ``string_arguments``: a call's arguments may be a JSON string, where the template rendered the catalogue's;
    ``result_parts``, ``result_objects``: a tool result may be a list of text parts, or a JSON object, where the
    template renders one; ``empty_calls``: an answer may carry ``tool_calls: []``, where the template renders one
    (Llama 3's refuses any number of calls but one); ``roles``: roles beside system (``OTHER_ROLES``) the template
    names and renders, sent mid-conversation; ``after_results``: the messages of ``AFTER_RESULTS`` and of those
    ``roles`` the template renders right after a call turn's results, in their append (each probed on a catalogue
    conversation); ``read_keys``: the names it reads as keys (``rendering.read_keys``)."""

    texts: tuple[str, ...] = TEXTS
    reasoning: bool = False
    fields: tuple[tuple[str, tuple[str, ...]], ...] = ()
    cycles: int = 15
    switches: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    parts: bool = False  # user content may be a list of text parts (the template tests what a value's type is)
    parallel: bool = True  # a call turn may carry several calls (the template renders a catalogue scenario that does)
    # a tool result may be a list of text parts, as OpenAI's format allows (the template renders one: one that
    # concatenates content refuses them)
    result_parts: bool = False
    # ... or a JSON object, as agent frameworks hand a tool's structured output on (where the template renders one)
    result_objects: bool = False
    # ... or a number, a tool's value handed on as it is (where the template renders one: ``forms.sweep_forms``)
    result_numbers: bool = False
    # an answer may carry an empty ``tool_calls``, as vLLM and some SDKs send one (where the template renders it)
    empty_calls: bool = False
    # roles beside system a loop may send mid-conversation that the template names and renders (OpenAI's developer)
    roles: tuple[str, ...] = ()
    # a call's arguments may be a JSON string, as OpenAI's format sends them (the template renders a catalogue scenario
    # that does: a template indexing the arguments refuses them, and every conversation with one with them)
    string_arguments: bool = False
    # roles of messages a loop may append with a call turn's results, before the model answers (``AFTER_RESULTS``: a
    # user who speaks while the tools ran, a notice injected after tool output; and ``roles``: a developer message an
    # agent injects there), those the template renders there
    after_results: tuple[str, ...] = ()
    # a call turn may carry text and reasoning together (gpt-oss's template refuses both: "Cannot pass both content
    # and thinking in an assistant message with tool calls!", and so every draw with one)
    text_with_reasoning: bool = True
    # the system prompt of the sweep of texts: a plain one, and the literals the template looks for in text (a
    # template that keys a rewrite on what the system prompt says, "Be concise.", reads it there: red team 22)
    system: str = SYSTEM
    # results sent whole (``outputs.sweep_outputs``): the words the template compares a text with (``c == 'None'``,
    # ``{'None': 'null'}.get(c)``: ``compared_literals``), then hex digits as long as each length it tests text with
    # (``c|length == 40``), as a digest or an id is
    whole_results: tuple[str, ...] = ()
    # the names the template reads as keys (``arguments.file_path``): the sweep of repeated values calls tools with
    # them and repeats their values in later turns (``repeats``)
    read_keys: tuple[str, ...] = ()

    @classmethod
    def of(cls, ctx: AuditContext) -> SearchSpace:
        reasoning = ctx.shapes.reasoning
        reads = ctx.reach
        translated = message_reads(ctx.model.chat_template or "").translated  # a table's characters (red team 29)
        literals = tuple(
            _at_edges(lit) for lit in (*reads.literals, *reads.tested, *([translated] if translated else []))
        )
        lengths = (LONG, reads.length) if reads.length > LONG else (LONG,)
        longs = tuple(text for n in lengths for text in (long_text(n, "Step"), long_line(n)))
        cycles = min(MAX_CYCLES, max(15, reads.cycles + 1))
        roles = other_roles(ctx)
        return cls(
            texts=(*TEXTS, *literals, *longs),
            reasoning=bool(reasoning.mode),
            fields=reasoning.fields,
            cycles=cycles,
            switches=tuple(ctx.switches.values().items()),
            parts=bool(ctx.engine.is_template and _TYPE_TEST.search(ctx.model.chat_template or "")),
            parallel=any(s.ok for s in ctx.simulations if "parallel" in s.scenario.tags),
            string_arguments=any(s.ok for s in ctx.simulations if s.scenario.id.endswith("/args_string")),
            result_parts=renders(ctx, results_as_parts),
            result_objects=renders(ctx, results_as_objects),
            result_numbers=renders(ctx, results_as_numbers),
            empty_calls=renders(ctx, answers_with_empty_calls),
            roles=roles,
            after_results=tuple(r for r in (*AFTER_RESULTS, *roles) if renders(ctx, partial(after_results, role=r))),
            text_with_reasoning=not reasoning.mode or renders(ctx, _call_text_with_reasoning),
            system=" ".join((SYSTEM, *literals)),
            whole_results=_whole_results(ctx),
            read_keys=template_read_keys(ctx.model.chat_template or "") if ctx.engine.is_template else (),
        )


MAX_EXACT_LENGTHS = 8  # lengths a template tests text with that a whole result is written at


def _whole_results(ctx: AuditContext) -> tuple[str, ...]:
    """``SearchSpace.whole_results`` for the template (none for an engine that is no template); a word holding a
    control token's text is left out (``special_token_injection`` judges those)."""
    template = ctx.model.chat_template
    if not (ctx.engine.is_template and template):
        return ()
    words = [w for w in template_compared_literals(template) if not any(c in w for c in ctx.special_texts if c)]
    lengths = sorted(n for n in message_reads(template).length_thresholds if 2 < n <= LONG)[:MAX_EXACT_LENGTHS]
    digits = [(HEX_DIGITS * (n // len(HEX_DIGITS) + 1))[:n] for n in lengths]
    return tuple(dict.fromkeys((*words, *digits)))


HEX_DIGITS = "9fceb02d0ae598e95dc970b74767f19372d61af8"  # a commit's hash: what a text of only hex digits is


def _at_edges(literal: str) -> str:
    """A text holding ``literal`` inside and at its end, and at its start unless the literal starts with whitespace:
    a template that removes it as a prefix or a suffix, or strips it (``removesuffix('TERMINATE')``, ``trim('…')``),
    changes only a text that starts or ends with it (red team 29). A turn that starts with whitespace starts inside a
    token after ChatML's line end, and no comparison could judge it (``search:unjudged``)."""
    start = "" if literal[:1].isspace() else f"{literal} "
    return f"{start}before {literal} after {literal}"


# What a loop may append with a call turn's results, in the same block, before the model answers: the user speaking
# while the tools ran (a correction, an interruption), and a notice an agent injects after tool output
AFTER_RESULTS: dict[str, str] = {"user": "Actually, use Celsius.", "system": "Reminder: keep answers short."}


def after_results(messages: list[Message], role: str, text: str | None = None) -> list[Message]:
    """A ``role`` message right after the first call turn's results, in the same append: ``text``, or the role's
    in ``AFTER_RESULTS`` (a role beside those, OpenAI's ``developer``, the notice's)."""
    end = next((i for i, m in enumerate(messages) if m["role"] == "tool"), None)
    if end is None:
        return messages
    while end < len(messages) and messages[end]["role"] == "tool":
        end += 1
    text = AFTER_RESULTS.get(role, AFTER_RESULTS["system"]) if text is None else text
    return [*messages[:end], {"role": role, "content": text}, *messages[end:]]


def _call_text_with_reasoning(messages: list[Message]) -> list[Message]:
    """Every call turn with a text and reasoning next to its calls."""
    return [
        {**m, "content": m.get("content") or CALL_TEXTS[0], "reasoning_content": REASONING[0]}
        if m["role"] == "assistant" and m.get("tool_calls")
        else m
        for m in messages
    ]


def _results(messages: list[Message], form: Callable[[str], Any]) -> list[Message]:
    return [
        {**m, "content": form(m["content"])} if m["role"] == "tool" and isinstance(m.get("content"), str) else m
        for m in messages
    ]


def results_as_parts(messages: list[Message]) -> list[Message]:
    """Every tool result's text as a list of one text part."""
    return _results(messages, lambda text: [{"type": "text", "text": text}])


def results_as_objects(messages: list[Message]) -> list[Message]:
    """Every tool result's text as the JSON object a tool returns it in."""
    return _results(messages, lambda text: {"result": text, "ok": True})


NUMBER_RESULT = 21.0  # a number a tool returns, one the sweep of values sends as an argument too (``SWEEP``)


def results_as_numbers(messages: list[Message]) -> list[Message]:
    """Every tool result as the number a tool returned, handed on as it is."""
    return _results(messages, lambda _: NUMBER_RESULT)


def answers_with_empty_calls(messages: list[Message]) -> list[Message]:
    """Every answer (an assistant turn without calls) with an empty ``tool_calls``."""
    return [{**m, "tool_calls": []} if m["role"] == "assistant" and not m.get("tool_calls") else m for m in messages]
