"""Play a scenario the way an RL rollout does, with the template standing in for the model.

For each assistant turn the "sampled" ids are what the model would emit: the template's rendering of that
turn as the final message, cut at the engine's stop token and tokenized in context (the tokenization the
model was trained on). Environment messages are appended with the same ``Trajectory`` RL code would use.
At the end we also build what naive rollout code would have: the parsed conversation re-rendered and encoded.

This is the audit's side (the checks read its ``Simulation``s through ``AuditContext``), not part of the public
``rollout`` library, which it only uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_audit.errors import InternalError, RenderError, detached
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.bridge import BridgeError
from tito_audit.rollout.buffer import Trajectory
from tito_audit.rollout.payloads import message_payloads, payload_in
from tito_audit.rollout.stop import single_token
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.rollout.turn_roles import ANSWER, CALL, turn_roles
from tito_audit.rollout.turn_start import turn_start
from tito_audit.scenarios.adapt import ADAPTERS, call_function, reasoning_of
from tito_audit.scenarios.shapes import Shapes
from tito_audit.scenarios.shown_values import letters_present, name_in_place
from tito_audit.scenarios.spec import Scenario

Message = dict[str, Any]


@dataclass
class Turn:
    """One assistant turn as the simulator derived it."""

    index: int  # message index of the assistant turn
    prompt_text: str
    completion_text: str  # rendered text after the prompt (up to the end of the render)
    sampled_ids: list[int]
    stop_id: int
    stop_rendered: bool  # the template writes a stop token after this turn
    stop_deferred: bool  # ...but only once another message follows (the turn's own render lacks it)
    trailing_text: str  # text the template renders after the stop token
    gen_prompt_extra: str  # generation-prompt text that the history rendering does not have
    gen_prompt_missing: str  # history text at that place instead
    # The message's own render before the turn: ``prompt_text`` where the template keeps it once the turn is history
    # (up to ``gen_prompt_extra``), else its rewrite (an earlier turn's analysis dropped, a system prompt moved).
    history_before: str
    seam_merged: bool  # a token straddles the prompt/completion boundary
    tool_calls_dropped: bool
    dropped_calls: list[int] = field(default_factory=list)  # which of the message's tool calls do not render
    # The message's own text after the stop the engine meets first (its calls, its answer after its reasoning):
    # the template writes a stop inside the turn, so an engine ends the turn before the message does.
    cut_text: str = ""


@dataclass
class Simulation:
    scenario: Scenario
    messages: list[Message]  # after adaptation
    adapters: tuple[str, ...]
    trajectory: Trajectory | None = None
    turns: list[Turn] = field(default_factory=list)
    bridge_errors: list[tuple[int, BridgeError]] = field(default_factory=list)
    naive_ids: list[int] = field(default_factory=list)
    error: RenderError | None = None
    internal: InternalError | None = None  # a render failed in our code or a library's, not the template's

    @property
    def ok(self) -> bool:
        return self.error is None and self.internal is None and self.trajectory is not None


def _stop_strings(renderer: Renderer, stop_ids: Sequence[int]) -> dict[str, int]:
    return {renderer.tokenizer.convert_ids_to_tokens(i): i for i in stop_ids}


def _tool_names(message: Message) -> list[str]:
    return [call_function(c).get("name", "") for c in message.get("tool_calls") or []]


def _dropped_calls(message: Message, completion: str, in_place: Callable[[int, str], bool]) -> list[int]:
    """Indices of tool calls whose function name is not rendered (the k-th call of a name needs k mentions), nor
    written in a form of the template's own (``in_place(i, name)``: another case, a namespace cut, dots written
    as underscores, every turn alike: ``scenarios.shown_values``). Where the turn holds the name as it is, but not
    as often as the calls carry it, the template writes it as it is, and the missing copy is missing (no marker
    render is spent on it: the second of parallel calls a template writes a turn each for)."""
    seen: dict[str, int] = {}
    dropped = []
    for i, name in enumerate(_tool_names(message)):
        seen[name] = seen.get(name, 0) + 1
        copies = completion.count(name)
        if copies >= seen[name]:
            continue
        if copies or not (letters_present(name, completion) and in_place(i, name)):
            dropped.append(i)
    return dropped


def _name_in_place(
    renderer: Renderer, history: list[Message], index: int, tools: Any, full: str, start: int
) -> Callable[[int, str], bool]:
    """``in_place(i, name)`` for ``_dropped_calls``: ``shown_values.name_in_place`` for message ``index``'s call
    ``i`` in ``full``, inside the turn (at ``start`` or after)."""

    def render(messages: Sequence[Message]) -> str:
        return renderer.render(list(messages), tools=tools)

    return lambda i, _name: name_in_place(render, history[: index + 1], i, full, start)


def derive_turn(
    renderer: Renderer,
    history: list[Message],
    index: int,
    tools: Any,
    stop_ids: Sequence[int],
    emit_reasoning: tuple[str, str] | None = None,
    prefixes: Sequence[str | None] = (),
    reasoning_field: str = "reasoning_content",
) -> Turn:
    """The ids a model would sample for ``history[index]`` (an assistant message).

    ``emit_reasoning`` (the delimiters as the template writes them): where the template does not render this turn's
    reasoning (in ``reasoning_field``), not even as the last turn, the model emits it anyway; the sampled text then
    carries it, in the template's delimiters, where the template would write it (``emit``).
    ``prefixes``: the renders ``_first_render_error`` made of ``history``'s prefixes with ``tools`` (the k-th of the
    first k+1 messages, None where no loop renders it), which are this turn's prompt and full text where their
    generation prompts agree.

    The turn starts where the generation prompt ends in the message's own render (``turn_start``: not inside an
    earlier turn that the render with this message rewrites) and ends at the first stop token the engine meets.
    Where the message's own content (its text, reasoning, calls) follows that stop, the stop is inside the turn
    (``cut_text``): the engine ends the turn there, and nothing of the message is passed off as template text.
    """
    known = len(prefixes) > index and index > 0 and history[index - 1]["role"] != "assistant"
    before, rendered = (prefixes[index - 1], prefixes[index]) if known else (None, None)
    prompt = before if before is not None else renderer.render(history[:index], tools=tools, add_generation_prompt=True)
    message = history[index]
    full = rendered if rendered is not None else renderer.render(history[: index + 1], tools=tools)

    def history_text() -> str:
        return renderer.render(history[:index], tools=tools)

    def own(text: str) -> bool:  # asked only where the history's tail may be the turn's own end (rare)
        return payload_in(text, message_payloads(message)) is not None

    start = turn_start(prompt, full, history_text, own)
    completion = full[start:]
    dropped_calls = _dropped_calls(message, completion, _name_in_place(renderer, history, index, tools, full, start))
    dropped = bool(dropped_calls)
    if dropped:
        # The template cannot show the call; a model would still emit it, so emit it as text.
        as_text = ADAPTERS["calls_as_content"]([message])[0]
        full = renderer.render([*history[:index], as_text], tools=tools)
        start = turn_start(prompt, full, history_text)
        completion = full[start:]
    shared = common_prefix_len(prompt, full)  # where the generation prompt and the history part (generation_prompt)
    if emit_reasoning:
        tags = (emit_reasoning[0].strip(), emit_reasoning[1].strip())
        thought = reasoning_of(message, tags, reasoning_field)
        # a generation prompt that closes a reasoning block itself (thinking off) leaves the model nothing to emit
        if thought and thought not in completion and not prompt.rstrip().endswith(tags[1]):
            completion = emit(thought, completion, prompt, emit_reasoning)
            full = full[:start] + completion
    stops = _stop_strings(renderer, stop_ids)
    hits = [(completion.find(s), s) for s in stops if s and s in completion]
    deferred = False
    kind = CALL if message.get("tool_calls") else ANSWER
    if not hits:
        # A template that writes the turn's end only once another message follows (GLM's next-turn opener,
        # a closer written before the next message): the model samples it all the same.
        said = _deferred_stop(renderer, history, index, tools, full, stops, prefixes, kind)
        if said:
            full, completion, deferred = full + said, completion + said, True
            hits = [(completion.rfind(said.strip()), said.strip())]
    cut = ""
    if hits:
        pos, text = min(hits)
        stop_id, stop_rendered = stops[text], True
        body_end, trailing = start + pos, completion[pos + len(text) :]
        if payload_in(trailing, message_payloads(message)):  # the message goes on after the stop: cut there
            cut, trailing = trailing, ""
    else:
        stop_id, stop_rendered = _turn_stop(renderer, stop_ids, kind), False
        body_end, trailing = len(full), ""
    ids, offsets = renderer.encode_window(full, start, body_end)  # the tokens around the completion suffice
    body = [t for t, (a, b) in zip(ids, offsets, strict=True) if a >= start and b <= body_end and b > a]
    seam = any(a < start < b for a, b in offsets)
    return Turn(
        index=index,
        prompt_text=prompt,
        completion_text=completion,
        sampled_ids=[*body, stop_id],
        stop_id=stop_id,
        stop_rendered=stop_rendered,
        stop_deferred=deferred,
        trailing_text=trailing,
        gen_prompt_extra=prompt[shared:],
        gen_prompt_missing=full[shared : shared + max(0, len(prompt) - shared)] if shared < len(prompt) else "",
        history_before=full[:start],
        seam_merged=seam,
        tool_calls_dropped=dropped,
        dropped_calls=dropped_calls,
        cut_text=cut,
    )


def _turn_stop(renderer: Renderer, stop_ids: Sequence[int], kind: str) -> int:
    """The stop a model emits after a turn of ``kind`` whose end the template does not render: the template's end
    for that kind of turn, else eos, else the engine's first stop."""
    tok = renderer.tokenizer
    word = turn_roles(renderer).end_of(kind)
    candidates = [single_token(tok, word) if word else None, tok.eos_token_id]
    return next((int(i) for i in candidates if i is not None and i in stop_ids), stop_ids[0])


_NEXT_PROBE: Message = {"role": "user", "content": "Go on."}  # a message to follow a last turn with


def _deferred_stop(
    renderer: Renderer,
    history: list[Message],
    index: int,
    tools: Any,
    full: str,
    stops: dict[str, int],
    prefixes: Sequence[str | None],
    kind: str = ANSWER,
) -> str:
    """The text up to and including the stop token the template writes right after assistant turn ``index`` once
    another message follows it (only whitespace before it), or ``""``. The next message of ``history``, or a user
    turn after the last one."""
    after = prefixes[index + 1] if index + 1 < len(prefixes) else None
    if after is None:
        following = history[index + 1 : index + 2] or [_NEXT_PROBE]
        try:
            after = renderer.render([*history[: index + 1], *following], tools=tools)
        except RenderError:
            return ""
    if not after.startswith(full):  # the next message rewrites this turn: the template's own turn end, as probed
        end = turn_roles(renderer).end_of(kind)
        return end if end in stops else ""
    rest = after[len(full) :]
    body = rest.lstrip()
    hit = next((s for s in sorted(stops, key=len, reverse=True) if s and body.startswith(s)), None)
    return rest[: len(rest) - len(body) + len(hit)] if hit else ""


def emit(thought: str, completion: str, prompt: str, written: tuple[str, str]) -> str:
    """``completion`` with ``thought`` in it as the model writes it: inside the empty block the template writes there
    (a generation prompt that opens it, an empty block on the turn), else in a block of its own first."""
    opener, closer = written
    tags = (opener.strip(), closer.strip())
    head = completion[: len(completion) - len(completion.lstrip())]
    if prompt.rstrip().endswith(tags[0]):  # the prompt opened the block
        if completion.lstrip().startswith(tags[1]):
            return head + thought + completion.lstrip()
        return f"{thought}{closer}{completion}"
    empty = completion.find(tags[0])
    if empty != -1 and completion[empty + len(tags[0]) :].lstrip().startswith(tags[1]):
        cut = empty + len(tags[0])
        return completion[:cut] + thought + completion[cut:].lstrip()
    return (opener.lstrip("\n") if prompt.endswith("\n") else opener) + thought + closer + completion


def _first_render_error(
    renderer: Renderer, messages: list[Message], tools: Any, texts: list[str | None] | None = None
) -> RenderError | None:
    """The first prefix of ``messages`` a rollout loop renders (``renders_in_a_loop``; with a generation prompt
    unless it ends with the assistant) that fails to render, or None; ``texts`` receives each prefix's render in
    order (None for a prefix no loop renders)."""
    for i in range(1, len(messages) + 1):
        if not renders_in_a_loop(messages, i):
            if texts is not None:
                texts.append(None)
            continue
        try:
            text = renderer.render(
                messages[:i], tools=tools, add_generation_prompt=messages[i - 1]["role"] != "assistant"
            )
        except RenderError as err:
            return detached(err)
        if texts is not None:
            texts.append(text)
    return None


def renders_in_a_loop(messages: Sequence[Message], i: int) -> bool:
    """Whether a rollout loop renders the first ``i`` of ``messages``: the prompt before each assistant turn, each
    assistant turn, and the whole conversation. Never a system prompt alone, nor a block of messages cut inside
    (one of two tool results, a tool result before the system notice appended with it): a template that refuses
    those (no user message yet, a call without its result) refuses nothing a loop sends it, and is audited on the
    conversation as sent, not adapted for them."""
    return i == len(messages) or messages[i]["role"] == "assistant" or messages[i - 1]["role"] == "assistant"


def adapt_to_template(
    renderer: Renderer, scenario: Scenario, shapes: Shapes | None = None
) -> tuple[list[Message], tuple[str, ...], RenderError | None]:
    """The conversation in the shape the template accepts (``shapes``, probed once per template); if the
    template still refuses it, the fallback adapters one by one and together, like a practitioner would."""
    messages, shaped, err, _ = _adapted(renderer, scenario, shapes)
    return messages, shaped, err


def _adapted(
    renderer: Renderer, scenario: Scenario, shapes: Shapes | None
) -> tuple[list[Message], tuple[str, ...], RenderError | None, list[str | None]]:
    """``adapt_to_template``, and the renders of the returned conversation's prefixes where it renders."""
    messages, shaped = (shapes or Shapes()).apply(scenario.messages_list())
    if renderer.tools_as is not None and scenario.tools:  # tool declarations in the schema the template reads
        shaped = (*shaped, renderer.tools_as[0])
    tools = list(scenario.tools)
    texts: list[str | None] = []
    err = _first_render_error(renderer, messages, tools, texts)
    if err is None or err.kind in ("timeout", "too_large", "security"):
        return messages, shaped, err, texts
    for names, adapted in fallbacks(messages):
        texts = []
        if _first_render_error(renderer, adapted, tools, texts) is None:
            return adapted, (*shaped, *names), None, texts
    return messages, shaped, err, []


# The adapters tried, one by one and then together, where the template refuses a conversation in its own shape
FALLBACK_ADAPTERS: tuple[tuple[str, ...], ...] = (
    ("system_into_user",),
    ("tool_as_user",),
    ("system_into_user", "tool_as_user"),
)


def fallbacks(messages: list[Message]) -> Iterator[tuple[tuple[str, ...], list[Message]]]:
    """Each set of ``FALLBACK_ADAPTERS`` that changes ``messages``, and the messages it makes."""
    for names in FALLBACK_ADAPTERS:
        adapted = messages
        for name in names:
            adapted = ADAPTERS[name](adapted)
        if adapted != messages:
            yield names, adapted


def simulate(
    renderer: Renderer, scenario: Scenario, stop_ids: Sequence[int], shapes: Shapes | None = None
) -> Simulation:
    renderer = renderer.with_kwargs(**scenario.kwargs) if scenario.kwargs else renderer
    messages, adapters, err, prefixes = _adapted(renderer, scenario, shapes)
    emit = shapes.reasoning.emits if shapes is not None else None
    field = shapes.reasoning.field if shapes is not None else "reasoning_content"
    sim = Simulation(scenario, messages, adapters)
    if err is not None:
        sim.error = detached(err)
        return sim
    tools = list(scenario.tools)
    traj = Trajectory(renderer, stop_ids, tools)
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    try:
        traj.start(messages[: assistants[0]])
        for n, idx in enumerate(assistants):
            turn = derive_turn(renderer, messages, idx, tools, stop_ids, emit, prefixes, field)
            sim.turns.append(turn)
            traj.append_sampled(turn.sampled_ids, message=messages[idx])
            nxt = assistants[n + 1] if n + 1 < len(assistants) else len(messages)
            # the messages up to the next assistant turn; none where one follows at once (the generation prompt
            # alone: the model goes on, as a loop that keeps a text and a call as two assistant messages has it)
            if nxt > idx + 1 or nxt < len(messages):
                try:
                    traj.append_messages(messages[idx + 1 : nxt])
                except BridgeError as exc:
                    sim.bridge_errors.append((idx, detached(exc)))
                    # Append anyway, as code without the check would, so later checks see the consequence.
                    traj.append_refused(messages[idx + 1 : nxt], exc)
        naive_text = renderer.render(messages, tools=tools)
        naive = renderer.encode(naive_text)
        last = sim.turns[-1]
        if last.trailing_text and naive_text.endswith(last.trailing_text):
            trailing = len(renderer.encode(last.trailing_text))
            naive = naive[: len(naive) - trailing] if trailing else naive
        elif last.stop_deferred:  # the re-render writes the sampled stop once the conversation goes on: no seam
            naive = [*naive, last.stop_id]
        sim.naive_ids = naive
    except RenderError as exc:
        sim.error = detached(exc)  # kept: its traceback holds this frame, which holds ``sim``
        return sim
    sim.trajectory = traj
    return sim
