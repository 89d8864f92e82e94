"""The sweep of a large context: a coding agent's conversation that grows past what a harness compacts at.

Harnesses that manage their context clear older tool output once the conversation passes some total (tokens,
or characters as a template can count them), and a template may do the same to earlier turns only. Red team 62
built such a budget at run time (``'%d000'|format(20)|int`` characters) and wrote the rewrite without an
``{% if %}``, so that neither a number of its code nor template coverage could name it; no conversation of the search
grew past about twenty thousand characters, and the template was a clean SAFE.

So one sweep (``sweep_context``) reads a short file, then a long one (``CONTEXT_FILES``: 64,000 characters in all,
about sixteen thousand tokens, what a coding agent reads in a few turns), then answers, and a user turn and another
answer follow: once the long one is appended, the short one is history past any total under that. Two reads of that
size, not more: a sweep is played cut after each block, and its renders count against the search's share of the
characters a template may render (with five reads doubling to 124,000 characters, Llama 3.2's search ran out of its
share after 24 of its 40 conversations; with two reaching 124,000, after 23 on the mutation study's control that
upper-cases every result). A budget past that total is still not met.
"""

from __future__ import annotations

from tito_audit.audit.search.conversations import declarations, placed, sweep_turn, tool_call
from tito_audit.audit.search.space import SearchSpace
from tito_audit.scenarios.searched import Conversation, Message

# The sizes of the files read, in characters: 64,000 in all
CONTEXT_FILES: tuple[int, ...] = (4_000, 60_000)
# A module's source as long as the largest file (every line another, as a file's lines are), cut to each size
SOURCE = "".join(f"def handler_{i}(event):\n    return event.get({i})\n\n" for i in range(max(CONTEXT_FILES) // 40))


def sweep_context(space: SearchSpace) -> Conversation:
    """The sweep of a large context (see the module docstring), reasoning on every turn where the template shows
    it."""
    counter = [0]
    messages: list[Message] = [{"role": "user", "content": "Read the modules and tell me what main does."}]
    for k, size in enumerate(CONTEXT_FILES):
        source = SOURCE[:size]
        call = tool_call("read_file", {"file_path": f"src/module_{k}.py"})
        messages += placed(sweep_turn(space, None, call, k=k), [source], counter)
    messages += [
        sweep_turn(space, "main dispatches each event to its handler.", k=0),
        {"role": "user", "content": "Thanks."},
        sweep_turn(space, "You're welcome.", k=1),
    ]
    return Conversation(tuple(messages), declarations(messages), ())
