"""The sweep of content forms: messages in the shapes clients send that no other conversation of the search does.

The other conversations send a message's content as one text (or, where the template tests its type, one text
part), a call's arguments as a dict (or the compact JSON string of one), and texts of printable characters. Clients
send more: a user turn of several text parts (a question and a pasted log), a screenshot beside its caption, a
recording or a file beside text, an answer whose content is a list of text parts (Anthropic's content blocks
converted), a model's arguments as it wrote them (pretty-printed JSON, cut off where it hit its token limit, or
nothing at all for a tool without parameters), and tool output with the characters a terminal or a file leaves in it
(a spinner's backspaces and bell, a byte order mark, Unicode's line separators). Tools return more than prose:
nothing (``[]``, ``{}``, ``null``), a list of records, an error object, an error whose details follow on later
lines; and multi-agent loops name who spoke (``name`` on an assistant turn). A template that rewrites any of those
in earlier turns only (parts joined another way, an image, a recording or a file written as a placeholder,
arguments compacted or replaced by ``{}``, characters translated away, an empty result or an error summarized, an
agent's name written in its header) met none of them and got a clean SAFE (red teams 23, 24 and 26, each confirmed
by hand with ``apply_chat_template``).

So one sweep (``sweep_forms``) plays them all, as a loop sends them. A template that refuses a form refuses its
block only (``accepted.py``: the block is kept in its plainest form, or dropped); the texts the forms carry are text
cores every other sweep plays too, so a block dropped for its form alone names no value (``search:refused:forms``
is left for what only this sweep holds: the terminal's characters, the results that are no prose).
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from tito_audit.audit.search.conversations import declarations, placed, sweep_turn, tool_call
from tito_audit.audit.search.space import TEXTS, SearchSpace
from tito_audit.scenarios.searched import Conversation, Message

# What terminals and files leave in tool output: a spinner's backspaces and its bell, a form feed with text after it
# (a page break, as pdftotext writes between pages: red team 44's template kept the first page only), a vertical tab
# and a DEL, a file saved with a byte order mark, Unicode's line and paragraph separators and NEL in JSON text
TERMINAL_OUTPUT = "added 212 packages\n|\b/\b-\b\\\bdone\x07\x0cfound 0 vulnerabilities\x0b\x7f"
BOM_FILE = "\ufeff[server]\nport=8080\n"
SEPARATORS = '{"msg": "line one\u2028line two\u2029line three\x85end"}'
# What tools return that is not prose: nothing found (an empty list, an empty object, a JSON null), a list of
# records, an error as an object, and an error whose details follow on later lines (red team 26)
EMPTY_RESULTS = ("[]", "{}", "null")
RECORDS = '[{"id": 1, "title": "Fix login"}, {"id": 2, "title": "Update docs"}]'
ERROR_OBJECT = '{"error": "rate limit exceeded", "code": 429}'
ERROR_LINES = "Error: command failed with exit status 2\nmake: *** [all] Error 2\n"
# the names multi-agent loops give assistant turns (OpenAI's ``name`` on any message: who spoke)
AGENT_NAMES = ("planner", "researcher")


# the other parts OpenAI's format sends beside text: a recording and a file
AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZFZm10IBAAAAABAAEA", "format": "wav"}}
FILE = {"type": "file", "file": {"filename": "router.log", "file_data": "data:text/plain;base64,ZXJyb3I6IHRpbWVvdXQK"}}


def _parts(*texts: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": t} for t in texts]


def sweep_forms(space: SearchSpace) -> Conversation:
    """The sweep of content forms (see the module docstring): results that are no prose (``EMPTY_RESULTS``,
    ``RECORDS``, ``ERROR_OBJECT``, ``ERROR_LINES``) of a named agent's calls, in one turn of parallel calls where the
    template renders them, answered by a named agent and followed by a user turn; a call whose arguments are
    pretty-printed JSON; a call cut off inside its arguments, answered by an error; a call whose arguments are empty;
    results that hold a terminal's characters, a byte order mark and Unicode's separators; a screenshot returned as
    a caption and an image; a call whose text is a list of parts; then user turns of two text parts, with an image,
    a recording and a file, each answered (every form then history). The opening is the plain user turn every
    template renders: a block refused is dropped alone."""
    said = partial(sweep_turn, space)
    counter = [0]
    pretty = json.dumps({"city": "Paris", "unit": "celsius"}, indent=2)
    cut_off = '{"city": "Paris", "unit": "cel'  # a model that hit its token limit
    calls = [
        tool_call("search_files", {"query": "*.tmp"}),
        tool_call("get_user", {"id": 7}),
        tool_call("lookup", {"key": "x"}),
        tool_call("list_issues", {"state": "open"}),
        tool_call("send_email", {"to": "ana@example.com"}),
        tool_call("run", {"cmd": "make"}),
    ]
    results = [*EMPTY_RESULTS, RECORDS, ERROR_OBJECT, ERROR_LINES]
    # results that are no prose, by a named agent: in one turn of parallel calls where the template renders them
    # (one block, not six, in an episode played cut after each), else one by one
    agent = {"name": AGENT_NAMES[1]}
    if space.parallel:
        no_prose = placed({**said(None, *calls, k=1), **agent}, results, counter)
    else:
        turns = [{**said(None, c, k=k % 2), **(agent if k == 0 else {})} for k, c in enumerate(calls)]
        no_prose = [m for turn, out in zip(turns, results, strict=True) for m in placed(turn, [out], counter)]
    messages: list[Message] = [
        {"role": "user", "content": "What's the weather in Paris?"},
        # first, in plain calls: a template that refuses a form further on only once it is history (a list of
        # parts) refuses every block after it
        *no_prose,
        # answered by a named agent, then a user turn: every result before it history
        {**said(TEXTS[1], k=0), "name": AGENT_NAMES[0]},
        {"role": "user", "content": "What's the weather in Paris?"},
        *placed(said(None, tool_call("get_weather", pretty), k=0), ["Sunny, 21 C."], counter),
        *placed(said(None, tool_call("get_weather", cut_off), k=1), ["Error: city not found"], counter),
        # a tool without parameters, its arguments streamed as nothing
        *placed(said(None, tool_call("get_time", ""), k=0), ["2024-05-01T12:34:56Z"], counter),
        *placed(said(None, tool_call("run", {"cmd": "npm install"}), k=0), [TERMINAL_OUTPUT], counter),
        *placed(said(None, tool_call("read_file", {"path": "config.ini"}), k=1), [BOM_FILE], counter),
        *placed(said(None, tool_call("fetch", {"url": "https://example.com"}), k=0), [SEPARATORS], counter),
        *placed(said(None, tool_call("screenshot", {}), k=1), [[*_parts("Paris"), {"type": "image"}]], counter),
        # an answer whose content is a list of text parts (a conversation converted from Anthropic's content blocks)
        *placed(
            {**said(None, tool_call("get_weather", {"city": "Paris"}), k=0), "content": _parts(*TEXTS[:2])},
            [TEXTS[1]],
            counter,
        ),
        said("It is sunny in Paris.", k=0),
        # the turns after the parts: text cores, played by every sweep, so that a template that refuses parts (and
        # so two answers in a row after it) drops no value of its own
        {"role": "user", "content": _parts("Paris", "Sunny, 21 C.")},
        said(TEXTS[1], k=1),
        {"role": "user", "content": [*_parts("Paris"), {"type": "image"}]},
        said(TEXTS[3], k=0),
        {"role": "user", "content": [*_parts("Paris"), AUDIO]},
        said(TEXTS[1], k=1),
        {"role": "user", "content": [*_parts("Paris"), FILE]},
        said(TEXTS[3], k=0),
    ]
    return Conversation(tuple(messages), declarations(messages), ())
