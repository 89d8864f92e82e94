"""A sweep the template refuses, cut to the part of it the template accepts.

A sweep (``sweep``) puts many values into one long episode. A template that refuses one piece of it refuses the
whole episode: gpt-oss's template raises on a tool declared without a description (the coding agent's
``todo_write``), Mistral's on a call without a nine-character id (one of the sweep of texts' calls), Gemma's on a
second system message. Played as it is, such a sweep tries none of its values, and nothing said so: a rewrite
keyed on a traceback in a tool result went untried on gpt-oss because a tool of the same episode had no
description.

``accepted`` keeps what a loop can send this template: the episode's opening (the messages before its first
assistant turn), then each of its blocks in order (a message and the tool results after it: a tool cycle, a user
turn, an answer; calls split over assistant messages in a row stay one block with their results) where the episode
so far with that block still renders, each tool called declared as the sweep declares it (``sweep.like_sweep``). A
block the template refuses is tried once more in its plainest form (``plainest``: its calls named as the catalogue
names them, with ids of nine letters and digits: what the block carries, its texts, arguments and results, kept);
refused again, it is dropped and counted. The rest of the episode is kept around it, ended where the model last
answered. Each block is tested by one render of the episode so far as the loop renders it (with the generation
prompt unless it ends with the assistant), a trial that is neither cached nor counted by template coverage (only
conversations played count). The episode kept is then played as any sweep is. What a dropped block carried that no
conversation played holds (``held``) is a gap: the sweep is named (``search:refused:NAME``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from tito_audit.audit.search.conversations import call_id
from tito_audit.audit.search.space import NAME_SHAPES
from tito_audit.audit.simulation import FALLBACK_ADAPTERS, fallbacks
from tito_audit.errors import RenderError
from tito_audit.rollout.call_arguments import arguments_dict
from tito_audit.scenarios.searched import Conversation, Message

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

# Failures a smaller episode does not get past: the sandbox refused the template's code, or the template's budget is
# spent. A refusal (it raised, its code failed) or a limit one render ran into (time, size: a long episode's) may.
_FINAL = ("security", "budget")
_PLAIN_IDS = 90_000  # the plainest form's ids count from here (``call00000`` style: no sweep's id is one of them)


def refusal(error: RenderError | None) -> bool:
    """Whether a sweep that failed to render may have a part the template accepts (see ``_FINAL``)."""
    return error is not None and error.kind not in _FINAL


def blocks(messages: tuple[Message, ...]) -> tuple[list[Message], list[list[Message]]]:
    """The opening (every message before the first assistant turn) and the blocks after it: each message that is not
    a tool result starts one, the tool results after it join it, and so does a call turn that follows a call turn
    whose results have not come yet (parallel calls split into messages: their results answer both)."""
    first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    out: list[list[Message]] = []
    for m in messages[first:]:
        unanswered = bool(out) and bool(out[-1][-1].get("tool_calls"))
        if out and (m["role"] == "tool" or (unanswered and m.get("tool_calls"))):
            out[-1].append(m)
        else:
            out.append([m])
    return list(messages[:first]), out


def plainest(block: list[Message], start: int) -> list[Message]:
    """``block`` with every call named as the catalogue names its tool (``NAME_SHAPES[0]``) and given an id of nine
    letters and digits (the ``start``-th on), its results answering those: the names and ids a template may refuse,
    everything else (texts, arguments, results, reasoning) as it was."""
    ids: dict[Any, str] = {}
    out: list[Message] = []
    n = start
    for m in block:
        if m.get("tool_calls"):
            calls = []
            for j, call in enumerate(m["tool_calls"]):
                n += 1
                new = call_id("short", n, j)
                ids[call.get("id", ("none", n))] = new
                calls.append({**call, "id": new, "function": {**call["function"], "name": NAME_SHAPES[0]}})
            out.append({**m, "tool_calls": calls})
        elif m["role"] == "tool":
            pending = [v for k, v in ids.items() if v not in {r.get("tool_call_id") for r in out}]
            answered = ids.get(m.get("tool_call_id"), pending[0] if pending else None)
            result = {**m, **({"name": NAME_SHAPES[0]} if "name" in m else {})}
            out.append({**result, "tool_call_id": answered} if answered else result)
        else:
            out.append(m)
    return out


def accepted(
    conversation: Conversation, like: Callable[[list[Message]], Conversation], renders: Callable[[Conversation], bool]
) -> tuple[Conversation | None, list[list[Message]], int]:
    """The part of ``conversation`` the template accepts (see the module docstring), the blocks it refused (in
    their plainest form too) and how many it accepted only in their plainest form; None where no assistant turn is
    left. ``like``: the messages as a conversation of the sweep's (its tool declarations); ``renders``: whether the
    template renders a conversation."""
    opening, rest = blocks(conversation.messages)
    kept, refused, reshaped = opening, [], 0
    for k, block in enumerate(rest):
        for n, form in enumerate((block, plainest(block, _PLAIN_IDS + 10 * k))):
            if renders(like([*kept, *form])):
                kept, reshaped = [*kept, *form], reshaped + n
                break
        else:
            refused.append(block)
    while kept and kept[-1]["role"] != "assistant":  # the episode ends where the model last answered
        kept = kept[:-1]
    if len(kept) <= len(opening):
        return None, refused, reshaped
    return like(kept), refused, reshaped


def held(messages: Iterable[Message]) -> set[str]:
    """What messages carry that a rewrite may be keyed on: each text (content, result, reasoning; each text part of
    a list of parts) and each argument value (of a JSON string too), as JSON. A form carries none of its own: a
    block refused for a list of parts, an image or arguments that are not JSON held only the values inside them."""
    out: set[str] = set()
    for m in messages:
        for key in ("content", "reasoning_content"):
            value = m.get(key)
            if isinstance(value, list):  # content parts: their texts (an image carries none)
                out.update(
                    json.dumps(p["text"]) for p in value if isinstance(p, dict) and isinstance(p.get("text"), str)
                )
            elif value:
                out.add(json.dumps(value, sort_keys=True))
        for call in m.get("tool_calls") or []:
            arguments = call["function"].get("arguments")
            if isinstance(arguments, str):  # a JSON string's values; one that is not JSON is a form, no value
                values = list((arguments_dict(arguments) or {}).values())
            else:
                values = list(arguments.values()) if isinstance(arguments, dict) else [arguments]
            out.update(json.dumps(v, sort_keys=True) for v in values)
    return out


def renders_whole(ctx: AuditContext) -> Callable[[Conversation], bool]:
    """Whether the template renders a whole conversation as the loop renders it (``trial_text``)."""
    text = trial_text(ctx)
    return lambda conversation: text(conversation, None) is not None


def trial_text(
    ctx: AuditContext, play: Any = None, chars: bool = True
) -> Callable[[Conversation, bool | None], str | None]:
    """A trial render of a whole conversation as the loop renders it (with the generation prompt unless it ends with
    the assistant, or as asked), in the shape the template accepts (``AuditContext.shapes``), with its kwargs, else
    adapted as the audit's own scenarios had to be for this template (``simulation.fallbacks``: tool results as user
    turns only for a template that refuses them as tool messages): its text, or None where the template refuses it.
    No other adapter: a block a template refuses in its own shape is one a loop does not send it, and adapting the
    whole episode for that block would judge another loop. ``Renderer.render_trial``: neither cached nor counted by
    template coverage, unless played through ``play`` (``Coverage.play``); ``chars``: its characters are charged."""
    needed = {names for s in ctx.simulations if s.ok for names in FALLBACK_ADAPTERS if set(names) <= set(s.adapters)}

    def text(conversation: Conversation, add_generation_prompt: bool | None = None) -> str | None:
        renderer = ctx.renderer.with_kwargs(**dict(conversation.kwargs)) if conversation.kwargs else ctx.renderer
        messages, _ = ctx.shapes.apply(list(conversation.messages))
        tried = (messages, *(adapted for names, adapted in fallbacks(messages) if names in needed))
        for shaped in tried:
            agp = shaped[-1]["role"] != "assistant" if add_generation_prompt is None else add_generation_prompt
            try:
                return renderer.render_trial(shaped, list(conversation.tools), agp, play, chars)
            except RenderError:
                continue
        return None

    return text
