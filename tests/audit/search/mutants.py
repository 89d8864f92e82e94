"""Generic history-only mutation operators for the mutation study (issue 40): each turns a template into one that
rewrites history the way real templates do, or (the controls) changes every turn alike.

An operator prepends a preamble that rebinds ``messages`` before the template reads it: every message the operator
selects is replaced by a changed copy (``dict(m, key=value)``: the sandbox changes no message in place), and the
template renders the rest as it did. A history-only operator selects by position (every message but the last, or
those outside a window of the last N), so a message renders one way while it is last and another once the
conversation grows past it: a history rewrite. A control selects every message, the last included: each turn
renders the same however long the conversation grows, and a template that was SAFE stays SAFE.

A mutant is *effective* when its render of the oracle conversation (``ORACLES``: what each operator needs to show,
all in one: capitals and a dot in tool names, five arguments, whitespace at the edges of every text, text next to
calls, reasoning on every turn of a long episode, long tool results) differs from the original template's: only
then can any conversation tell it apart, and the study counts only effective mutants (the others are equivalent:
a template that never renders reasoning is not changed by dropping it). Used by ``test_mutants.py`` and
``benchmarks/bench_mutants.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_PREAMBLE = """{{%- set mutation = namespace(messages=[]) %}}
{{%- for m in messages %}}
{{%- if {select} %}}{{%- set mutation.messages = mutation.messages + [{change}] %}}
{{%- else %}}{{%- set mutation.messages = mutation.messages + [m] %}}{{%- endif %}}
{{%- endfor %}}
{{%- set messages = mutation.messages %}}
"""

_CALL_PREAMBLE = """{%- set mutation = namespace(messages=[]) %}
{%- for m in messages %}
{%- if SELECT and m.tool_calls %}
{%- set calls = namespace(v=[]) %}
{%- for c in m.tool_calls %}{%- set f = c.function if c.function is defined else c %}
{%- set calls.v = calls.v + [dict(c, function=dict(f, CHANGE))] %}{%- endfor %}
{%- set mutation.messages = mutation.messages + [dict(m, tool_calls=calls.v)] %}
{%- else %}{%- set mutation.messages = mutation.messages + [m] %}{%- endif %}
{%- endfor %}
{%- set messages = mutation.messages %}
"""


@dataclass(frozen=True)
class Operator:
    """``name``; ``kind``: ``history`` (a mutant that must not be SAFE) or ``control`` (one that must stay SAFE);
    ``apply(template)``: the mutant's source."""

    name: str
    kind: str
    what: str
    apply: Callable[[str], str]


_EVERY = """{{%- set mutation = namespace(messages=[]) %}}
{{%- for m in messages %}}{{%- set mutation.messages = mutation.messages + [{change}] %}}{{%- endfor %}}
{{%- set messages = mutation.messages %}}
"""


def _message_change(select: str, change: str) -> Callable[[str], str]:
    return lambda template: _PREAMBLE.format(select=select, change=change) + template


def _every_message(change: str) -> Callable[[str], str]:
    """A change of every message alike (a control: no ``if``, so no arm of the preamble goes untaken)."""
    return lambda template: _EVERY.format(change=change) + template


def _calls_change(select: str, change: str) -> Callable[[str], str]:
    """A change of each tool call's function of the messages ``select`` picks (``change``: keyword arguments of
    ``dict(f, ...)``)."""
    preamble = _CALL_PREAMBLE.replace("SELECT", select).replace("CHANGE", change)
    return lambda template: preamble + template


EARLIER = "not loop.last"  # every message but the last
TRIM = "dict(m, content=m.content|trim) if m.content is string else m"
DROP_REASONING = "dict(m, reasoning_content='') if m.reasoning_content is defined and m.reasoning_content else m"
DROP_CALL_TEXT = "dict(m, content='') if m.tool_calls and m.content else m"
PREFIX = "dict(m, content='» ' + m.content) if m.content is string and m.content else m"
TRIM_REASONING = "dict(m, reasoning_content=m.reasoning_content|trim) if m.reasoning_content is string else m"
CUT_RESULT = "dict(m, content=m.content[:20]) if m.role == 'tool' and m.content is string else m"
LOWER_NAMES = "name=f.name|lower"
UPPER_RESULT = "dict(m, content=m.content|upper) if m.role == 'tool' and m.content is string else m"
RESERIALIZE = "arguments=(f.arguments|tojson(indent=2)) if f.arguments is mapping else f.arguments"

OPERATORS: tuple[Operator, ...] = (
    Operator("filter_trim", "history", "earlier texts trimmed", _message_change(EARLIER, TRIM)),
    Operator("filter_lower_names", "history", "earlier tool names lower-cased", _calls_change(EARLIER, LOWER_NAMES)),
    Operator(
        "window_reasoning",
        "history",
        "reasoning dropped outside the last six messages",
        _message_change("loop.revindex > 6", DROP_REASONING),
    ),
    Operator(
        "window_results",
        "history",
        "tool results cut to 20 characters outside the last eight messages",
        _message_change("loop.revindex > 8", CUT_RESULT),
    ),
    Operator(
        "reserialize_arguments",
        "history",
        "earlier arguments re-serialised (indented JSON)",
        _calls_change(EARLIER, RESERIALIZE),
    ),
    Operator(
        "drop_call_text", "history", "earlier text next to calls dropped", _message_change(EARLIER, DROP_CALL_TEXT)
    ),
    Operator("drop_reasoning", "history", "earlier reasoning dropped", _message_change(EARLIER, DROP_REASONING)),
    Operator(
        "filter_upper_results", "history", "earlier tool results upper-cased", _message_change(EARLIER, UPPER_RESULT)
    ),
    # Controls change what every turn says alike, and keep every payload whole, if in another form: a result in
    # another letter case (red team 30: tool_support called it dropped, a false UNSAFE). A name changed on every
    # turn is tested on templates of its own (tests/audit/checks/test_tool_support.py): this preamble's own
    # ``c.function is defined`` arm would go untaken and be named.
    Operator("control_trim", "control", "every text trimmed", _every_message(TRIM)),
    Operator("control_upper_results", "control", "every tool result upper-cased", _every_message(UPPER_RESULT)),
    Operator("control_prefix", "control", "every text prefixed with a marker", _every_message(PREFIX)),
    Operator("control_trim_reasoning", "control", "every reasoning trimmed", _every_message(TRIM_REASONING)),
)


def _oracle(parallel: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One conversation with what every operator needs to show (see the module docstring), and its tools; its call
    turns carry two calls each, or one (``parallel=False``, for a template that refuses parallel calls)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": " Be brief. "},
        {"role": "user", "content": " What is the weather? "},
    ]
    names = ("GetWeather", "mcp.weather.Forecast")
    for n in range(12):
        calls = [
            {
                "id": f"call{2 * n + k:05d}",
                "type": "function",
                "function": {
                    "name": names[(n + k) % 2],
                    "arguments": {"city": " Paris ", "days": 3, "unit": "c", "hourly": True, "lang": "fr"},
                },
            }
            for k in range(2 if parallel else 1)
        ]
        turn = {"role": "assistant", "content": "I'll check the weather. ", "reasoning_content": " Call it. "}
        messages.append({**turn, "tool_calls": calls})
        for call in calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": call["function"]["name"],
                    "content": " Sunny, 21 C, light wind from the west. ",
                }
            )
    messages += [
        {"role": "assistant", "content": "It is sunny. ", "reasoning_content": " Summarise. "},
        {"role": "user", "content": " Thanks "},
        {"role": "assistant", "content": "You are welcome. ", "reasoning_content": " Close. "},
    ]
    tools = [
        {"type": "function", "function": {"name": n, "description": "Weather.", "parameters": {"type": "object"}}}
        for n in names
    ]
    return messages, tools


ORACLES = (_oracle(True), _oracle(False))


def effective(model: Any, mutant: str) -> bool:
    """Whether ``mutant`` renders the oracle conversation differently from ``model``'s template, the oracle played
    in the shape the template accepts (``AuditContext.shapes``: its adaptations) and with two calls a turn or, where
    the template refuses that, one. False where the template renders no oracle (nothing tells the two apart)."""
    from tito_audit.audit.context import AuditContext, AuditOptions
    from tito_audit.errors import RenderError
    from tito_audit.rendering import Renderer

    ctx = AuditContext(model, AuditOptions(scenarios="quick"))
    other = Renderer(model.tokenizer, mutant)
    for messages, tools in ORACLES:
        shaped = ctx.shapes.apply(messages)[0]
        try:
            original = ctx.renderer.render(shaped, tools=tools)
        except RenderError:
            continue
        try:
            return bool(other.render(shaped, tools=tools) != original)
        except RenderError:
            return True
    return False
