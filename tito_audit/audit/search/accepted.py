"""A sweep the template refuses, cut to the part of it the template accepts.

A sweep (``sweep``) puts many values into one long episode. A template that refuses one piece of it refuses the
whole episode: gpt-oss's template raises on a tool declared without a description (the coding agent's
``todo_write``), Mistral's on a call without a nine-character id (one of the sweep of texts' calls), Gemma's on a
second system message. Played as it is, such a sweep tries none of its values, and nothing said so: a rewrite
keyed on a traceback in a tool result went untried on gpt-oss because a tool of the same episode had no
description.

``accepted`` keeps what a loop can send this template: the episode's opening (the messages before its first
assistant turn), then each of its blocks in order (a message and the tool results after it: a tool cycle, a user
turn, an answer) where the episode so far with that block still renders, each tool called declared as the sweep
declares it (``sweep.like_sweep``). A block the template refuses is dropped and counted; the rest of the episode
is kept around it. Each block is tested by one render of the whole episode so far (the cheap test: a template
refuses a conversation as a whole); the episode kept is then played as any sweep is, and where the template still
refuses it, or nothing but the opening is left, the sweep is named as not played (``search:refused:NAME``): its
values were not tried anywhere else in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tito_audit.audit.simulation import FALLBACK_ADAPTERS, fallbacks
from tito_audit.errors import TEMPLATE_RENDER_KINDS, RenderError
from tito_audit.scenarios.searched import Conversation, Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext


def refusal(error: RenderError | None) -> bool:
    """Whether a render failure is the template refusing what it was given (it raised, or its code failed on it),
    not a limit it ran into (time, size, the sandbox, its budget: a smaller episode would not be accepted more)."""
    return error is not None and error.kind not in (*TEMPLATE_RENDER_KINDS, "internal")


def blocks(messages: tuple[Message, ...]) -> tuple[list[Message], list[list[Message]]]:
    """The opening (every message before the first assistant turn) and the blocks after it: each message that is not
    a tool result starts one, and the tool results after it join it."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    out: list[list[Message]] = []
    for m in messages[first:]:
        if m["role"] == "tool" and out:
            out[-1].append(m)
        else:
            out.append([m])
    return list(messages[:first]), out


def accepted(
    conversation: Conversation, like: Callable[[list[Message]], Conversation], renders: Callable[[Conversation], bool]
) -> tuple[Conversation | None, int]:
    """The part of ``conversation`` the template accepts (see the module docstring) and how many blocks it
    refused; None where no assistant turn is left. ``like``: the messages as a conversation of the sweep's (its
    tool declarations); ``renders``: whether the template renders a conversation."""
    opening, rest = blocks(conversation.messages)
    kept, refused = opening, 0
    for block in rest:
        candidate = [*kept, *block]
        if renders(like(candidate)):
            kept = candidate
        else:
            refused += 1
    while kept and kept[-1]["role"] != "assistant":  # the episode ends where the model last answered
        kept = kept[:-1]
    if len(kept) <= len(opening):
        return None, refused
    return like(kept), refused


def renders_whole(ctx: AuditContext) -> Callable[[Conversation], bool]:
    """One render of a whole conversation, in the shape the template accepts (``AuditContext.shapes``), with its
    kwargs, else adapted as the audit's own scenarios had to be for this template (``simulation.fallbacks``: tool
    results as user turns only for a template that refuses them as tool messages): True where the template renders
    it (a limit it runs into counts as not rendered). No other adapter: a block a template refuses in its own shape
    is one a loop does not send it, and adapting the whole episode for that block would judge another loop."""
    needed = {names for s in ctx.simulations if s.ok for names in FALLBACK_ADAPTERS if set(names) <= set(s.adapters)}

    def renders(conversation: Conversation) -> bool:
        renderer = ctx.renderer.with_kwargs(**dict(conversation.kwargs)) if conversation.kwargs else ctx.renderer
        messages, _ = ctx.shapes.apply(list(conversation.messages))
        tried = (messages, *(adapted for names, adapted in fallbacks(messages) if names in needed))
        for shaped in tried:
            try:
                renderer.render(shaped, tools=list(conversation.tools), add_generation_prompt=False)
            except RenderError:
                continue
            return True
        return False

    return renders
