"""tool_support: tool calls, tool results and arguments survive rendering in their canonical form.

A template that rejects every tool conversation shape fails too. The canonical form is the shape the template is
found to need ([Coverage](../checks.md#coverage-and-adaptations)); a template that rejects the ``tool`` role but
renders tool results as user turns is adapted, not failed (the verdict line says ``needs tool results sent as user
turns``). Training tool use through a template that drops them teaches the model to act on calls it cannot see.

An argument value or a tool result counts as rendered in whatever form the template writes it on every turn, with
nothing lost (``scenarios.shown_values``): as it is, JSON-escaped, as Python's ``repr`` of the dict writes it
(``{{ arguments }}``), with runs of whitespace squeezed, in another letter case or Unicode form, or in a form of the
template's own (HTML-escaped elements, JSON written compact): the call or the result rendered with a marker in the
value's place shows the marker, and what the real render writes in the marker's place holds every letter and digit
of the value, in order. A value the template cuts short, strips of its digits, replaces by a note or rewrites is
dropped. A tool result is looked for where the model is shown it: in the prompt the loop renders once its block is
appended, when a turn is sampled after it (a result written only once it is history, ``if not loop.last``, is
dropped: the model never saw it when it acted); that the template writes it otherwise once it is history (a number
normalized, an old result cut short) is a rewrite of the history, which the appends and the re-render judge. Of
several results with the same text, each needs its own copy (a template that writes only the first of parallel
results shows one).

**Example** (``microsoft/Phi-3-mini-4k-instruct``, ``probe/canonical``, class ``template``, reason
``drops_tool_calls``): ``tool calls are not rendered in the canonical form (with the adaptations it needs:
content_empty)`` and the same for tool results, then per scenario ``tool result (message 2) does not appear in the
rendering``: the verdict is ``unsafe``. ``allenai/OLMo-2-1124-7B-Instruct`` renders neither either; content None is
rejected by both (transformers drops a None ``content`` key, and their templates read it), hence ``content_empty``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Outcome
from tito_audit.rollout.call_arguments import arguments_dict
from tito_audit.scenarios.adapt import call_function, content_text, with_arguments
from tito_audit.scenarios.shown_values import (
    MARKER,
    in_place,
    leaves_shown,
    letters,
    marker_place,
    shown,
    whole_number,
    with_text,
)


def _argument_values(arguments: object) -> dict[str, Any]:
    """A call's top-level argument values (from a dict, or a JSON string of one): strings that hold text, and every
    other value (a number, a boolean, null, an object, an array: red team 33's templates dropped them, or wrote
    ``0.5`` as ``0`` and ``true`` as ``false``, and were clean SAFEs while only strings were looked for)."""
    parsed = arguments_dict(arguments)
    if parsed is None:  # a string that is not arguments: its text is the one value
        return {"": arguments} if isinstance(arguments, str) and arguments.strip() else {}
    return {str(k): v for k, v in parsed.items() if not isinstance(v, str) or v.strip()}


def value_forms(value: Any) -> tuple[str, ...]:
    """The texts a template may write a value as: a string as it is; anything else as JSON (spaced, compact, with
    or without ASCII escapes) and as Python writes it (``True``, ``None``, a dict's ``repr``); a whole float also
    as an integer (JSON has one number type: ``21.0`` and ``21`` are one value to a parser)."""
    if isinstance(value, str):
        return (value,)
    forms = [json.dumps(value), json.dumps(value, ensure_ascii=False), json.dumps(value, separators=(",", ":"))]
    return tuple(dict.fromkeys([*forms, *whole_number(value), repr(value), str(value)]))


def _written_in_place(
    renderer: Any, messages: list[dict[str, Any]], i: int, j: int, key: str, full: str, tools: Any
) -> bool:
    """Whether the render writes argument ``key`` of message ``i``'s call ``j`` in a form of its own (an encoding
    ``shown`` does not know): see ``shown_values.in_place``. A value the template drops, truncates or replaces
    fails; so does one whose call the template does not render at all."""
    call = messages[i]["tool_calls"][j]
    arguments = call_function(call)["arguments"]
    as_string = isinstance(arguments, str)
    parsed = arguments_dict(arguments) if key else None  # ``key`` "": the arguments are a text of their own
    value = parsed[key] if parsed is not None else arguments
    marked = {**parsed, key: MARKER} if parsed is not None else MARKER
    calls = list(messages[i]["tool_calls"])
    calls[j] = with_arguments(call, json.dumps(marked) if as_string and key else marked)
    marked_message = {**messages[i], "tool_calls": calls}
    if isinstance(value, (dict, list)):  # a mapping or an array: each leaf, in any order and form (``leaves_shown``)
        place = marker_place(_render(renderer, tools), messages, i, marked_message, full)
        return place is not None and leaves_shown(value, place)
    return in_place(_render(renderer, tools), messages, i, marked_message, value_forms(value), full)


def _result_in_place(
    renderer: Any, messages: list[dict[str, Any]], i: int, text: str, full: str, tools: Any, agp: bool = False
) -> bool:
    """Whether the render writes tool result ``i`` (whose text begins ``text``) in a form of its own: JSON compacted
    or re-indented, quotes escaped, another letter case, every turn alike (``shown_values``; ``agp``: ``full`` was
    rendered with the generation prompt)."""
    marked = with_text(messages[i], MARKER)
    return in_place(_render(renderer, tools, agp), messages, i, marked, text, full)


def _render(renderer: Any, tools: Any, agp: bool = False) -> Callable[[Sequence[dict[str, Any]]], str]:
    return lambda messages: renderer.render(list(messages), tools=tools, add_generation_prompt=agp)


def _result_shown(
    renderer: Any, messages: list[dict[str, Any]], i: int, text: str, full: str, tools: Any, nth: int = 1
) -> bool:
    """Whether tool result ``i`` (whose text begins ``text``; the ``nth`` result with that text) is rendered where
    the model is shown it: in the prompt the loop renders once the result's block is appended, when a turn is
    sampled after it, else in the whole conversation's render ``full`` (see the module docstring)."""
    end = _block_end(messages, i)
    agp = end < len(messages)
    if agp:
        try:
            full = renderer.render(messages[:end], tools=tools, add_generation_prompt=True)
        except RenderError:
            return False
    if shown(text, full, nth) or _result_in_place(renderer, messages[:end], i, text, full, tools, agp):
        return True
    # A text without a letter or digit (``[]``): no marker tells its copies apart, and history may have dropped an
    # older one; one copy is taken for it, as before copies were counted.
    return nth > 1 and not any(c.isalnum() for c in text) and shown(text, full)


_EDGE = 40  # characters of a result's start, and of its end, looked for (a long result is not searched whole)


def dropped_results(renderer: Any, messages: list[dict[str, Any]], full: str, tools: Any) -> list[int]:
    """The tool results (their indices) not rendered where the model is shown them (``_result_shown``): their
    first ``_EDGE`` characters (a result whose end only is cut is shown: ``cut_results``). Of several
    results with the same text, a copy may be another's (a template that writes the first result, or a block's
    last, in every slot): each must also show a marker of its own where all of them are marked (``_own_markers``),
    in the whole conversation's render or, where history drops it, in its block's prompt. The result's own text
    was found in that prompt as often as equal results precede it (``_result_shown``), so a marker in the history
    is not a result shown only there."""
    whole = [(content_text(m) or "").strip() if m["role"] == "tool" else "" for m in messages]
    texts = [w[:_EDGE] for w in whole]
    marked: dict[int, set[int]] = {}  # the block's end: the results whose own marker shows in its prompt
    dropped = []
    for i, text in enumerate(texts):
        nth = texts[: i + 1].count(text)
        ok = bool(text) and _result_shown(renderer, messages, i, text, full, tools, nth)
        if ok and texts.count(text) > 1:
            if len(messages) not in marked:  # the whole conversation first: one render shows every marker, mostly
                marked[len(messages)] = _own_markers(renderer, messages, len(messages), tools)
            end = _block_end(messages, i)
            if i not in marked[len(messages)] and end not in marked:
                marked[end] = _own_markers(renderer, messages, end, tools)
            ok = i in marked[len(messages)] or i in marked[end]
        if text and not ok:
            dropped.append(i)
    return dropped


def cut_results(renderer: Any, messages: list[dict[str, Any]], full: str, tools: Any) -> list[tuple[int, str]]:
    """The tool results longer than ``_EDGE`` characters whose start is shown but not the rest, where the model is
    shown them, each with what is missing (``"end"``: its last ``_EDGE`` characters; ``"middle"``: its start and end
    are there, not the whole): a template that cuts long results (to a length, to their first lines, to a head and a
    tail) on every turn. The model sees what the buffer holds, so buffer + delta stands; what it never sees is named
    (``tool_forms``: ``avoid:results_cut``)."""
    whole = [(content_text(m) or "").strip() if m["role"] == "tool" else "" for m in messages]
    heads, tails = [w[:_EDGE] for w in whole], [w[-_EDGE:] if len(w) > _EDGE else "" for w in whole]
    cut = []
    for i, tail in enumerate(tails):
        if not tail or not _result_shown(renderer, messages, i, heads[i], full, tools, heads[: i + 1].count(heads[i])):
            continue  # short, or dropped whole (``dropped_results``)
        if not _result_shown(renderer, messages, i, tail, full, tools, tails[: i + 1].count(tail)):
            cut.append((i, "end"))
        elif len(whole[i]) > 2 * _EDGE and not _result_shown(
            renderer, messages, i, whole[i], full, tools, whole[: i + 1].count(whole[i])
        ):
            cut.append((i, "middle"))
    return cut


def _block_end(messages: list[dict[str, Any]], i: int) -> int:
    """The index of the first assistant message after message ``i`` (the turn sampled once its block is in), or
    the conversation's length."""
    return next((k for k in range(i + 1, len(messages)) if messages[k]["role"] == "assistant"), len(messages))


def _own_markers(renderer: Any, messages: list[dict[str, Any]], end: int, tools: Any) -> set[int]:
    """The tool results before ``end`` whose own marker shows (in any case) in the prompt the loop renders at
    ``end`` (the whole render where nothing is sampled after), with every result's text replaced by a marker of its
    own."""
    marked = [
        with_text(m, _own_marker(i)) if m["role"] == "tool" and content_text(m) else m
        for i, m in enumerate(messages[:end])
    ]
    try:
        other = letters(renderer.render(marked, tools=tools, add_generation_prompt=end < len(messages)))
    except RenderError:
        return set()
    return {i for i, m in enumerate(marked) if m is not messages[i] and letters(_own_marker(i)) in other}


def _own_marker(i: int) -> str:
    """Result ``i``'s own marker: written as ordinary words, since a template may write a result otherwise by what
    it looks like (an all-alphanumeric text taken for base64 and omitted). It is looked for by its letters and
    digits (case and Unicode form folded), whatever spacing or punctuation the template adds."""
    return f"{MARKER} result {i:03d}"


def string_form(sim: Any, shapes: Any) -> bool:
    """``sim`` sends arguments as a JSON string where the shape the template is played in takes a dict: what it
    drops there is confined to that form (``tool_forms``: avoid it), not the canonical form's."""
    return bool(sim.scenario.id.endswith("/args_string") and shapes.arguments == "dict")


def missing_arguments(
    sim: Any, renderer: Any, full: str, tools: Any, screen: bool = False, only_mappings: bool = False
) -> list[tuple[int, str]]:
    """Per assistant message of ``sim`` whose calls render, the first argument value not rendered
    (``_missing_arguments``): in the message's own turn as sampled, and its place in the render that ends with it
    (``full``: the whole render, where no turn was sampled for it). A value history writes otherwise is
    ``history_rewrite``'s finding, not a drop: the buffer keeps the sampled call. ``screen``: see
    ``_missing_arguments`` (nor is a turn right after another assistant message read: ``lost_values``);
    ``only_mappings``: calls whose arguments are a JSON string are not read."""
    out = []
    for i, m in enumerate(sim.messages):  # as played (adapted), so that indices match the turns
        if not m.get("tool_calls") or any(t.tool_calls_dropped for t in sim.turns if t.index == i):
            continue
        if screen and _after_assistant(sim.messages, i):
            continue  # the search's reading: a turn read off the render of two assistant messages (``lost_values``)
        sampled = next((t.completion_text for t in sim.turns if t.index == i), None)  # the turn as sampled
        if sampled is None:
            missing = _missing_arguments(renderer, sim.messages, i, full, full, tools, screen, only_mappings)
        else:  # its place is looked for where the message is last, as sampled: history is history_rewrite's
            missing = _missing_arguments(
                renderer, sim.messages[: i + 1], i, sampled, None, tools, screen, only_mappings
            )
        if missing:
            out.append((i, missing[0]))
    return out


def _missing_arguments(
    renderer: Any,
    messages: list[dict[str, Any]],
    i: int,
    turn: str,
    full: str | None,
    tools: Any,
    screen: bool = False,
    only_mappings: bool = False,
) -> list[str]:
    """The argument values of message ``i``'s calls not rendered in its turn ``turn`` (the k-th of k equal
    values needs k copies: a parallel call written ``{}`` is not shown by its sibling's copy, nor a later call's by
    the user's words) nor in a form of the template's own (``_written_in_place``). A key the call's tool does not
    declare is not looked for: a template that writes the schema's keys only drops no declared traffic; nor is a
    null, or the value the schema declares as its ``default`` (a template may leave out what the tool assumes).

    ``screen`` (the counterexample search's reading of each conversation it plays): a number or a boolean found
    whole in the turn as often as the call holds it, and a mapping or an array whose every leaf the turn holds, are
    taken as shown without rendering their place. That may miss a value rewritten into one the turn holds anyway
    (a miss of the search, not a wrong answer: what it calls missing is what the check, which renders every
    place, calls missing)."""
    missing, seen = [], []
    for j, call in enumerate(messages[i].get("tool_calls") or []):
        declared = _declared(tools, call_function(call).get("name"))
        if only_mappings and isinstance(call_function(call)["arguments"], str):
            continue  # sent as a JSON string where the template is played with mappings: a form, tool_forms'
        for k, v in _argument_values(call_function(call)["arguments"]).items():
            if declared is not None and k and k not in declared:
                continue  # a key the tool does not declare: a template may write the schema's keys only
            if v is None or (declared is not None and k in declared and _is_default(declared[k], v)):
                continue  # a null, or the schema's default, may be left out: a tool reads an absent key alike
            # a string, or a mapping or array whole, as it is; a scalar is always looked for in its place (``1`` or
            # ``true`` is in most turns whatever the template wrote for it)
            forms = value_forms(v) if isinstance(v, (str, dict, list)) else ()
            seen.append(forms or ("", json.dumps(v)))  # a scalar counted apart from a string of its text
            if any(shown(f, turn, seen.count(forms)) for f in forms):
                continue
            if screen and _screened(v, turn, seen.count(seen[-1])):
                continue
            if full is None:  # rendered once, and only when a value must be looked for in its place
                try:
                    full = renderer.render(messages, tools=tools)
                except RenderError:
                    full = ""
            if not _written_in_place(renderer, messages, i, j, k, full, tools):
                missing.append(v if isinstance(v, str) else json.dumps(v))
    return missing


def _screened(value: Any, turn: str, times: int) -> bool:
    """``value`` (not a string) is in ``turn`` at a glance: a scalar as JSON or Python writes it, whole (not part of
    a longer number or word), ``times`` times; a mapping or an array, every leaf (``leaves_shown``)."""
    if isinstance(value, (dict, list)):
        return leaves_shown(value, turn)
    return any(
        len(re.findall(rf"(?<![\w.]){re.escape(form)}(?![\w]|\.\d)", turn)) >= times for form in value_forms(value)
    )


def _declared(tools: Any, name: Any) -> dict[str, Any] | None:
    """The arguments tool ``name`` declares (its ``parameters.properties``: name → schema), or None where the
    tools do not say (no such tool, no schema)."""
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            properties = (fn.get("parameters") or {}).get("properties")
            return properties if isinstance(properties, dict) else None
    return None


def _is_default(schema: Any, value: Any) -> bool:
    """``value`` is the ``default`` its schema declares, of the same JSON type (``1`` is not ``true``)."""
    return isinstance(schema, dict) and "default" in schema and json.dumps(schema["default"]) == json.dumps(value)


def call_form(message: dict[str, Any], dropped: list[int], canonical_content: str | None = None) -> str | None:
    """The form a drop is confined to, when it is not the canonical one (content ``canonical_content`` next to
    the calls, all of them dropped): None when the canonical form drops."""
    calls = message.get("tool_calls") or []
    if dropped and len(dropped) < len(calls) and 0 not in dropped:
        return "parallel_calls"
    content = content_text(message)
    if content == canonical_content or (not content and not canonical_content):
        return None
    return "tool_calls_with_empty_content" if content == "" else "tool_calls_with_content"


@check(
    id="tool_support",
    title="Tool calls survive rendering",
    severity="error",
    order=10,
    verdict="unsafe",
    explanation="""
A template that silently drops `tool_calls`, tool results or arguments in their canonical form (one call,
`content` None, dict arguments, the `tool` role; or the shape the template is found to need) cannot be used for
tool-calling RL: the model never sees its own tool traffic at inference, its sampled call vanishes from every
re-rendered context and the bridge for the tool result is computed against a history that never contained the
call. Drops confined to another form are `tool_forms`' concern.""",
    fix_hint="""
Use a template that renders `message.tool_calls` (name and arguments) and the `tool` role, or patch it
(`tito-audit fix`); do not train tool use through a template that cannot show it.""",
)
def tool_support(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "tool_support")
    shapes = ctx.shapes
    if shapes.rejects_tools is not None:
        found.add(
            "probe/canonical",
            "template",
            f"the template rejects every tool conversation shape: {shapes.rejects_tools}",
            reason="rejects_tool_traffic",
        )
        return found.outcome(found.findings[0].message, "")
    found.compared()  # the canonical probe
    words = {"tool_calls": "tool calls are", "arguments": "tool-call arguments are", "tool_results": "tool results are"}
    for what in shapes.drops:
        found.add(
            "probe/canonical",
            "template",
            f"{words[what]} not rendered in the canonical form"
            + (f" (with the adaptations it needs: {', '.join(shapes.adaptations)})" if shapes.adaptations else ""),
            reason=f"drops_{what}",
        )
    for sim in ctx.ok_simulations():
        if "tool" not in sim.scenario.tags:
            continue
        try:
            for category, message, reason in lost_values(ctx, sim):
                found.add(sim.scenario.id, category, message, reason=reason)
        except RenderError as err:
            found.failed(sim.scenario.id, err)
            continue
        found.compared()
    # One finding per message is enough to act on; keep the report readable.
    unique = {f.message: f for f in reversed(found.findings)}
    found.findings = [f for f in found.findings if unique[f.message] is f]
    summary = "tool calls, results and arguments render" if not found.findings else found.findings[0].message
    return found.outcome(summary, "no tool conversation renders")


def lost_values(ctx: AuditContext, sim: Any, screen: bool = False) -> Iterator[tuple[str, str, str]]:
    """What of ``sim``'s tool traffic the template does not render where the model is shown it, as findings
    (category, message, reason), lazily: a call dropped in its canonical form, a tool result not in the prompt
    after its block, an argument value not in its own turn. The check's reading of every scenario, and the
    counterexample search's of every conversation it plays (``search.property``: a value only a drawn
    conversation sends, lost in every turn alike, breaks no render against another). Raises ``RenderError``
    where the whole conversation does not render.

    ``screen``: the search's reading. It judges the canonical forms only, as the catalogue's scenarios send them: a
    result sent as text, lost with its tool's name too (not parts, an object or an image, nor a result shown only
    with a name: a template may write those otherwise on every turn, ``tool_forms``' concern) and not merely
    reordered (each of its lines in its prompt: ``tool_forms``' ``results_cut``); a call's arguments as a mapping
    where the template is played with mappings (not as a JSON string); a call turn sampled after a user turn or
    results (not one right after another assistant message, whose turn is read off the render of both: a rewrite of
    the first is ``history_rewrite``'s). It takes a value at a glance where it can (``_missing_arguments``)."""
    shapes = ctx.shapes
    for turn in sim.turns:
        if screen and _after_assistant(sim.messages, turn.index):
            continue
        form = call_form(sim.messages[turn.index], turn.dropped_calls, shapes.canonical_content)
        if turn.tool_calls_dropped and form is None:
            yield "template", dropped_message(sim.messages, turn), "drops_tool_calls"
    renderer, tools = ctx.renderer_for(sim.scenario), list(sim.scenario.tools)
    full = renderer.render(sim.messages, tools=tools)
    for i in dropped_results(renderer, sim.messages, full, tools):
        if screen and not _canonical_result(renderer, sim.messages, i, tools):
            continue
        yield "template", f"tool result (message {i}) does not appear in the rendering", "drops_tool_results"
    if string_form(sim, shapes):  # a drop confined to arguments sent as a JSON string: tool_forms'
        return
    only_mappings = screen and shapes.arguments == "dict"
    for i, missing in missing_arguments(sim, renderer, full, tools, screen, only_mappings):
        yield "serialization", f"argument value {missing!r} of message {i} is not rendered", "drops_arguments"


def _canonical_result(renderer: Any, messages: list[dict[str, Any]], i: int, tools: Any) -> bool:
    """Dropped tool result ``i`` is lost as the catalogue sends one: as text, and, sent by its call's id alone,
    lost with its tool's name given too; and not shown merely reordered (some line of it is not in the prompt the
    loop renders once its block is appended)."""
    message = messages[i]
    if not isinstance(message.get("content"), str):
        return False
    if not message.get("name"):
        named = _named_result(messages, i)
        if named is None:
            return False
        try:
            if i not in dropped_results(renderer, named, renderer.render(named, tools=tools), tools):
                return False  # shown once named: ``tool_forms``' ``results_without_name``
        except RenderError:
            return False
    lines = [line.strip() for line in message["content"].splitlines() if line.strip()]
    if len(lines) < 2:
        return True
    end = _block_end(messages, i)
    try:
        prompt = renderer.render(messages[:end], tools=tools, add_generation_prompt=True)
    except RenderError:
        return True
    # a line every message up to the block holds k times must be there k times (an equal result dropped is not
    # shown by its twin's lines, nor by the user's words)
    held = [x.strip() for m in messages[:end] for x in (content_text(m) or "").splitlines() if x.strip()]
    return not all(shown(line, prompt, held.count(line)) for line in lines)


def _named_result(messages: list[dict[str, Any]], i: int) -> list[dict[str, Any]] | None:
    """``messages`` with tool result ``i`` given the name of the call its ``tool_call_id`` answers (None: no call
    has that id)."""
    wanted = messages[i].get("tool_call_id")
    for m in reversed(messages[:i]):
        for call in m.get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id") == wanted and call_function(call).get("name"):
                return [*messages[:i], {**messages[i], "name": call_function(call)["name"]}, *messages[i + 1 :]]
    return None


def _after_assistant(messages: list[dict[str, Any]], i: int) -> bool:
    return i > 0 and messages[i - 1]["role"] == "assistant"


def dropped_message(messages: list[dict[str, Any]], turn: Any) -> str:
    calls = messages[turn.index].get("tool_calls") or []
    if len(turn.dropped_calls) == len(calls):
        return f"tool_calls of assistant message {turn.index} are not rendered"
    which = ", ".join(f"#{i + 1} ({call_function(calls[i]).get('name', '?')})" for i in turn.dropped_calls)
    return f"parallel tool call {which} of {len(calls)} in assistant message {turn.index} is not rendered"
