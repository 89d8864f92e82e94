"""The sweep of what tools print: results in the formats tools print them, each the last message of its append.

The other sweeps send tool results as prose, numbers as text, JSON, errors, a traceback, a file. Tools print more,
and red teams 27 and 28 keyed history rewrites on it, each a clean SAFE or a SAFE naming an arm no conversation
took (each confirmed by hand with ``apply_chat_template``): a Python tool's ``None``, a commit hash, a UUID, a CSV
export, a YAML document, a directory listing, a unified diff, a raw HTTP response (its call sending a bearer token),
an HTML page, a JSON Web Token, an image as a data URI, a link with tracking parameters, a dict's Python repr, a
string returned as JSON, an ``.env`` file's API key, file names with bidirectional controls, a macOS home path, an
SMS sent to an E.164 number, a log (``TOOL_OUTPUTS``), and a number handed on as it is where the template renders
one. A template may also rewrite a result only where it *is* one of the words it compares text with, or is exactly
as long as a length it tests (``SearchSpace.whole_results``, read from its code).

So one sweep (``sweep_outputs``) calls a tool a turn and returns each, so that each result is the last message of
the block the loop appends (a template that rewrites a result once a message follows it rewrites it in every render
of a block where it is not last: red team 27's token, redacted then); its first call turn's reasoning is a Markdown
plan (a title, then a list), the answer after them shows a chart as a Markdown image, the user turn after it ends in
a coding agent's ``<system-reminder>``, a ReAct agent's ``Final Answer:`` follows, then a user turn typed on a
phone (curly quotes, an ellipsis, a skin tone, a zero-width non-joiner, full-width brackets) with Cline's
``<environment_details>``, an AutoGen agent's ``TERMINATE``, and the episode ends with a chat client's command sent
as a user turn (``/clear``): every result, answer and user turn then history. Red team 29 added what agents' tools
print (a PDF's ligatures and bullets, JSON with ``NaN``, a Playwright snapshot's ``[ref=]``, OpenHands' exit
footer, an e-mail's signature and quote, a help desk's reply line, Slack's mentions, Persian and Arabic text, a call
named with its API's ``functions.`` prefix). Red team 62 added a failure as agent SDKs report it ("An error
occurred while running the tool. Please try again. Error: ...") and the model's retry. A sweep of its own, not a
part of the sweep of content forms: each sweep is played cut after each block, so its renders grow with the square
of its blocks.
"""

from __future__ import annotations

from typing import Any

from tito_audit.audit.search.conversations import declarations, placed, sweep_turn, tool_call
from tito_audit.audit.search.space import NUMBER_RESULT, TEXTS, SearchSpace
from tito_audit.scenarios.searched import Conversation, Message

# What tools print, in the formats they print it: each with the call that printed it
TOOL_OUTPUTS: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("python", {"code": "print(cache.get('Paris'))"}, "None"),
    ("python", {"code": "print(ok)"}, "True"),
    ("run", {"cmd": "git rev-parse HEAD"}, "9fceb02d0ae598e95dc970b74767f19372d61af8"),
    ("create_ticket", {"title": "Fix login"}, "3f2b8c1e-4d5a-4e6f-9a7b-1c2d3e4f5a6b"),
    (
        "read_file",
        {"path": "sales.csv"},
        "date,region,units,revenue\n2024-05-01,EU,12,340.50\n2024-05-02,US,7,199.00\n2024-05-03,EU,3,85.25\n"
        "2024-05-04,APAC,9,260.10\n",
    ),
    ("read_file", {"path": "config.yaml"}, "---\nname: app\nport: 8080\ndebug: false\n"),
    ("run", {"cmd": "ls"}, "README.md\nmain.py\nrequirements.txt\nsetup.cfg\n"),
    (
        "run",
        {"cmd": "git diff"},
        "diff --git a/main.py b/main.py\nindex 83db48f..bf269f4 100644\n--- a/main.py\n+++ b/main.py\n"
        "@@ -1,2 +1,2 @@\n def main():\n-    return 1 / 0\n+    return 1\n",
    ),
    (
        "http_get",
        {"url": "https://api.example.com/v1/status", "headers": {"Authorization": "Bearer 7f3kQ9xLmT2vR8wZ"}},
        'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{"status": "up"}',
    ),
    (
        "http_get",
        {"url": "https://example.com/paris"},
        "<!DOCTYPE html>\n<html><head><title>Paris</title></head><body><p>Sunny, 21 C.</p></body></html>",
    ),
    (
        "login",
        {"user": "ana"},
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbmEiLCJpYXQiOjE3MTQ1NjY0MDB9.c2lnbmF0dXJlLW5vdC1yZWFs",
    ),
    (
        "render_chart",
        {"city": "Paris"},
        "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
    ),
    ("search_web", {"query": "Paris weather"}, "https://www.example.com/paris?utm_source=newsletter&utm_medium=email"),
    ("python", {"code": "print(row)"}, "{'city': 'Paris', 'temp': 21, 'ok': True, 'alerts': None}"),
    ("python", {"code": "print(json.dumps(summary))"}, '"Sunny, 21 C."'),  # a string returned as JSON
    ("run", {"cmd": "cat .env"}, "OPENAI_API_KEY=sk-proj-4f9aQx7Lr2Tb8Wc1\nDEBUG=false\n"),
    # file names with Unicode's bidirectional controls (an override, an isolate), as downloads carry them
    ("run", {"cmd": "ls downloads"}, "invoice\u202egpj.exe\nreport \u2066(final)\u2069.pdf\n"),
    ("run", {"cmd": "pwd"}, "/Users/alice/projects/app"),
    ("send_sms", {"to": "+14155550132", "body": "Sunny, 21 C."}, "queued"),  # E.164, as SMS APIs take it
    # red team 29: what agents and their tools print, and the characters scraped, typed and OCR'd text carries
    ("read_pdf", {"path": "report.pdf"}, "The ﬁnal eﬀort:\n• ﬂow up 5%\n◦ cost down\u00ad3%"),
    ("python", {"code": "print(json.dumps(stats))"}, '{"mean": NaN, "max": Infinity}'),
    ("browser_snapshot", {}, '- Page Snapshot:\n- button "Search" [ref=e12]\n- link "Paris" [ref=e15]'),
    ("execute_bash", {"command": "make test"}, "All tests passed.\n[The command completed with exit code 0.]"),
    ("read_email", {"id": "m-17"}, "Sounds good.\n\nSent from my iPhone\n\n> On Mon, Ana wrote:\n> Lunch at noon?"),
    ("get_ticket", {"id": 4821}, "##- Please type your reply above this line -##\n\nMy order has not arrived."),
    ("slack_history", {"channel": "C024BE91L"}, "<!channel> deploy at 5pm, <@U024BE7LH> please review"),
    ("fetch_page", {"url": "https://example.com/fa"}, "می\u200cخواهم — مَرْحَبًا ـ （注意）：是，"),
    ("functions.get_weather", {"city": "Paris"}, "Sunny, 21 C."),  # a name with its API's prefix (Kimi, vLLM)
    # red team 62: a tool's failure as agent SDKs hand it to the model (the OpenAI Agents SDK's default error text),
    # then the model's retry with other arguments: a template may shorten a failed attempt once a later call follows
    (
        "read_file",
        {"path": "src/mian.py"},
        "An error occurred while running the tool. Please try again. Error: [Errno 2] No such file or directory: "
        "'src/mian.py'",
    ),
    ("read_file", {"path": "src/main.py"}, "def main():\n    return 1\n"),
    (
        "read_logs",
        {"service": "api"},
        "2024-05-01T12:34:56Z INFO  server started on :8080\n2024-05-01T12:35:02Z WARN  slow request: GET /v1/status"
        " 1.2s\n2024-05-01T12:35:09Z ERROR upstream timeout",
    ),
)
PLAN = "## Plan\n- Read what the tools returned.\n- Answer in one line."  # reasoning as a Markdown plan
REACT = "Thought: I now know the final answer…\nFinal Answer: Sunny, 21 C."  # a ReAct agent's answer
# what a user types on a phone and pastes: curly quotes, an ellipsis, a skin tone, a zero-width non-joiner,
# full-width punctuation, a Slack mention, a quoted e-mail
TYPED = (
    "What’s the weather in “Paris”…? 👍🏽 می\u200cخواهم （明天），<@U024BE7LH> asked.\n\n"
    "> On Mon, Ana wrote:\n> Lunch at noon?"
)
ENVIRONMENT = (
    "\n\n<environment_details>\n# Current Working Directory\n/Users/alice/app\n</environment_details>"  # Cline's
)
CHART = "\n\n![Forecast for Paris](https://example.com/charts/paris.png)"  # an image in an answer, in Markdown
REMINDER = "\n\n<system-reminder>\nThe user's time zone is Europe/Paris.\n</system-reminder>"  # a harness's note


def _printed(space: SearchSpace, counter: list[int]) -> list[Message]:
    """``TOOL_OUTPUTS``, a number where the template renders one, then the space's whole results (each a result of a
    call of ``lookup``), a call a turn, the first turn's reasoning a Markdown plan where reasoning reaches the
    render."""
    outputs: list[tuple[str, dict[str, Any], Any]] = [*TOOL_OUTPUTS]
    if space.result_numbers:  # a tool's value handed on as it is: a number, where the template renders one
        outputs.append(("get_temperature", {"city": "Paris"}, NUMBER_RESULT))
    outputs += [("lookup", {"key": "x"}, text) for text in space.whole_results]
    out: list[Message] = []
    for k, (name, args, text) in enumerate(outputs):
        turn = sweep_turn(space, None, tool_call(name, args), k=k % 2)
        if k == 0 and "reasoning_content" in turn:
            turn["reasoning_content"] = PLAN
        out += placed(turn, [text], counter)
    return out


def sweep_outputs(space: SearchSpace) -> Conversation:
    """The sweep of what tools print (see the module docstring)."""
    counter = [0]
    messages: list[Message] = [
        {"role": "user", "content": "What's the weather in Paris?"},
        *_printed(space, counter),
        sweep_turn(space, TEXTS[1] + CHART, k=0),
        {"role": "user", "content": "What's the weather in Paris?" + REMINDER},
        sweep_turn(space, REACT, k=1),
        {"role": "user", "content": TYPED + ENVIRONMENT},
        sweep_turn(space, TEXTS[1] + " TERMINATE", k=0),  # how an AutoGen agent ends its part
        # a chat client's command, sent as the user's turn
        {"role": "user", "content": "/clear"},
        sweep_turn(space, TEXTS[1], k=0),
    ]
    return Conversation(tuple(messages), declarations(messages), ())
