"""The sweep of repeated values: calls whose argument values come back in later turns, as an agent's do.

Coding agents read a file again after editing it, run the same tests again after a fix, fetch a page again. A
harness that manages its context may then shorten the older output to a pointer to the newer one, and a template
may do the same for earlier turns only (red team 60: the older result of a ``file_path``, a ``command`` or a ``url``
called again later, replaced by a note). No other conversation of the search repeats such a value in a later turn:
the sweep of ids repeats whole calls of its own tools, and the agent's sweep runs each command once. Each such
template was a clean SAFE.

So one sweep (``sweep_repeats``) calls a file tool and a shell tool with every key the template reads by name
(``SearchSpace.read_keys``: ``arguments.file_path``, ``args['url']``) and the keys agents' tools carry
(``AGENT_KEYS``), each with the value such a tool is given, then calls both again with the same values in later
turns, each time with another result. The answer, a user turn and another answer follow: every call is then history
before the last user message, where templates rewrite apart from the turns after it.
"""

from __future__ import annotations

from typing import Any

from tito_audit.audit.search.conversations import declarations, placed, sweep_turn, tool_call
from tito_audit.audit.search.space import SearchSpace
from tito_audit.scenarios.searched import Conversation, Message

# The keys agents' file, shell, web and search tools carry, with a value each is given
AGENT_KEYS: dict[str, Any] = {
    "file_path": "src/app.py",
    "path": "src/app.py",
    "command": "python -m pytest -q",
    "url": "https://example.com/docs",
    "query": "pytest fixture scope",
}
VALUE = "src/app.py"  # the value of a key the template reads that no agent's tool is known to carry
# What the two tools return each time they are called: another output every time, as a file edited in between, or
# tests fixed in between, give
OUTPUTS: tuple[str, ...] = (
    "def main():\n    return 1 / 0\n",
    "FAILED tests/test_app.py::test_main - ZeroDivisionError",
    "def main():\n    return 1\n",
    "1 passed in 0.02s",
)


def repeated_arguments(space: SearchSpace) -> dict[str, Any]:
    """Every key a call of the sweep carries: the agents' keys, then those the template reads, with their values."""
    return {**AGENT_KEYS, **{key: AGENT_KEYS.get(key, VALUE) for key in space.read_keys}}


def sweep_repeats(space: SearchSpace) -> Conversation:
    """The sweep of repeated values (see the module docstring), reasoning on every turn where the template shows
    it."""
    arguments = repeated_arguments(space)
    read, run = tool_call("read_file", arguments), tool_call("bash", {**arguments, "timeout": 60})
    counter = [0]
    messages: list[Message] = [{"role": "user", "content": "The tests fail. Fix them, then run them again."}]
    for k, call in enumerate((read, run, read, run)):
        messages += placed(sweep_turn(space, None, call, k=k), [OUTPUTS[k]], counter)
    messages += [
        sweep_turn(space, "Fixed: main no longer divides by zero, and the tests pass.", k=0),
        {"role": "user", "content": "Thanks."},
        sweep_turn(space, "You're welcome.", k=1),
    ]
    return Conversation(tuple(messages), declarations(messages), ())
