"""The sweep of tool schemas: calls that disagree with the tools' declarations, as models' calls do.

Every other conversation of the search declares its tools from its own calls (``conversations.declarations``):
each key in the order the call gives it, of the type of the value given, nothing else. So a template that rewrites
an earlier call by its tool's declaration met no call that the declaration would change, and got a clean SAFE:
arguments written in the order the schema declares them, a string of digits written as the number an ``integer``
parameter is, an argument equal to its ``default`` left out, a value written in its ``enum``'s spelling, calls of a
``strict`` tool written compactly, keys that start with ``_`` dropped (red team 22, each confirmed by hand with
``apply_chat_template``). Real tool sets declare their tools with all of that (OpenAI's strict functions, MCP
servers' JSON Schemas), and models' calls disagree with them in just those ways: keys in another order, numbers
as strings, a default given anyway, an enum in another case.

So one sweep (``sweep_schemas``) declares its tools as such tool sets do (``SCHEMA_TOOLS``: an ``enum`` with a
``default``, ``integer`` and ``boolean`` parameters with defaults, a ``strict`` tool whose every parameter is
required, keys in the shapes tool servers use: a leading underscore, camelCase, dotted; a shell tool's ``cmd``; and
what pydantic writes: a ``writeOnly`` password, a ``maxLength``, an ``array``, an optional value ``anyOf`` a type and
``null``), and calls them as models do: out of the declared order, a number and a boolean as strings, an enum value
in another case, every default given, a result whose output ends with a line end, a secret given, a title past its
maximum length, one value where a list is declared, null for an optional value (red team 24: a password redacted,
a title cut, a value wrapped in a list, a null dropped in earlier calls), a number past its ``maximum``, a key the
tool does not declare, a number where a string is declared, a ``dry_run`` flag (red team 28: a value clamped, a key
dropped, a number quoted, a dry run summarized in earlier calls). Its shrink keeps the
declarations of the tools still called (``sweep.like_sweep``, as for a coding agent's harness).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from tito_audit.audit.search.conversations import placed, sweep_turn, tool_call
from tito_audit.audit.search.space import SearchSpace
from tito_audit.scenarios.searched import Conversation, Message


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str], **more: Any) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": properties, "required": required}
    if more.get("strict"):
        parameters["additionalProperties"] = False
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters, **more},
    }


# A tool set as real ones declare it: the declared order of each tool's keys is not the order its calls below give
SCHEMA_TOOLS: tuple[dict[str, Any], ...] = (
    _tool(
        "get_forecast",
        "Get the weather forecast for a location.",
        {
            "location": {"type": "string", "description": "A city name."},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
            "include_hourly": {"type": "boolean", "default": False},
        },
        ["location"],
    ),
    _tool(
        "create_ticket",
        "Open a ticket in the issue tracker.",
        {
            "title": {"type": "string"},
            "priority": {"type": "string", "enum": ["low", "medium", "high"]},
            "labels": {"type": "array", "items": {"type": "string"}},
        },
        ["title", "priority", "labels"],
        strict=True,
    ),
    _tool(
        "search_docs",
        "Search the documentation.",
        {
            "query": {"type": "string"},
            "maxResults": {"type": "integer"},
            "user.id": {"type": "string"},
            "_trace_id": {"type": "string", "description": "Set by the client."},
        },
        ["query"],
    ),
    _tool(
        "run",
        "Run a shell command.",
        {"cmd": {"type": "string"}, "timeout": {"type": "number"}},
        ["cmd"],
    ),
    _tool("geocode", "Find a place by its postal code.", {"zip": {"type": "string"}}, ["zip"]),
    # what pydantic writes for a secret, a bounded string, an optional value and a list
    _tool(
        "login",
        "Log in to the billing portal.",
        {"username": {"type": "string"}, "password": {"type": "string", "format": "password", "writeOnly": True}},
        ["username", "password"],
    ),
    _tool(
        "create_issue",
        "Open an issue.",
        {
            "title": {"type": "string", "maxLength": 80},
            "labels": {"type": "array", "items": {"type": "string"}},
            "assignee": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
        },
        ["title"],
    ),
)


# a title of 100 characters, past the ``maxLength`` its tool declares
_LONG_TITLE = "Crash when uploading files larger than 2 GB through the web dashboard on Safari 17 under macOS Sonoma"


def sweep_schemas(space: SearchSpace) -> Conversation:
    """The sweep of tool schemas (see the module docstring): ``SCHEMA_TOOLS`` called as models call them, each
    call answered, then the answer, a user turn and another answer (every call then history)."""
    said = partial(sweep_turn, space)
    counter = [0]
    calls = (
        # out of the declared order, the enum in another case, the integer as a string
        (tool_call("get_forecast", {"unit": "Celsius", "location": "Paris", "days": "3"}), "Sunny, 21 C."),
        # every default given, the boolean as a string
        (
            tool_call("get_forecast", {"location": "Lyon", "unit": "celsius", "days": 3, "include_hourly": "false"}),
            "Rain, 14 C.",
        ),
        # a strict tool, out of the declared order
        (
            tool_call("create_ticket", {"priority": "high", "title": "Login page is broken", "labels": ["auth"]}),
            "#4821",
        ),
        # keys in every shape a tool server uses, a number as a string
        (
            tool_call(
                "search_docs", {"query": "install guide", "_trace_id": "t-81f2", "maxResults": "5", "user.id": "u7"}
            ),
            "1. Installation\n2. Quick start",
        ),
        # a shell tool's ``cmd``, its output ending with a line end
        (tool_call("run", {"cmd": "ls", "timeout": 30}), "README.md\nsetup.py\nsrc\n"),
        # past the declared ``maximum``, a key the tool does not declare, a number where a string is declared, and
        # a flag no declaration holds (red team 28: clamped, dropped, quoted, the call summarized in earlier turns)
        (tool_call("get_forecast", {"location": "Paris", "days": 30, "country": "FR"}), "Sunny all month."),
        (tool_call("geocode", {"zip": 94110}), "San Francisco, CA"),
        (tool_call("run", {"cmd": "make deploy", "dry_run": True}), "would deploy 3 services"),
        # a secret given, a title past its maximum length, a list given as one value, an optional value given as null
        (tool_call("login", {"username": "alice", "password": "hunter2"}), "ok"),
        (
            tool_call("create_issue", {"title": _LONG_TITLE, "labels": "bug", "assignee": None}),
            '{"number": 1742}',
        ),
    )
    messages: list[Message] = [{"role": "user", "content": "What's the weather in Paris and Lyon this week?"}]
    for k, (call, result) in enumerate(calls):
        messages += placed(said(None, call, k=k), [result], counter)
    messages += [
        said("Sunny in Paris, rain in Lyon; the ticket is #4821.", k=1),
        {"role": "user", "content": "Thanks. And next week?"},
        said("I will check again on Monday.", k=0),
    ]
    return Conversation(tuple(messages), SCHEMA_TOOLS, ())
