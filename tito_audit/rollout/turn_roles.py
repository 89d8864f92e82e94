"""Where a template writes its control text, by role: what opens and closes a turn, what wraps a tool call or a
reasoning block, what starts a conversation. Read from a few probe renders, never from a model name or a bracket
style the tool happens to know.

Each probe message carries a marker (text no template writes by itself) as its payload; what the template writes
around the markers is its own text. The regions read, each outside every content and argument slot:

- the turn end of an answer: what follows an assistant answer that is the last message (no generation prompt);
- the turn end of a tool call: what follows the call's last argument in the same position, after the call's
  wrapper (the answer's turn end where the template writes it there too, else its last control word:
  gpt-oss's ``<|call|>``, Gemma 4's ``<|tool_response>``);
- turn openers: the first control word of what follows an assistant turn before the next user or tool payload,
  and of the generation prompt (with every control word the generation prompt writes: ``<think>``,
  ``<|channel>``...);
- tool-call and reasoning wrappers: the control words before a call's name and around a reasoning payload;
- the conversation start: the control words before the first opener (``[gMASK]<sop>``, ``]~!b[``).

A control word is the extent of one such literal (``rollout.control_words``: ``<|im_end|>``, ``<turn|>``,
``[e~[``, ``@@END@@``...). The role decides which words count, the shape only where one ends, so ``<tools>`` in a
system prompt's prose is no control token while ``<|channel>`` before reasoning is. The probes are in
``rollout.role_probe``, the words inside one assistant message in ``rollout.payload_words``.

A template with no turn end after an answer (GLM's ``<|assistant|>...`` runs straight into ``<|user|>``) closes
its turns with the next turn's opener: an engine stops on that opener (``convention`` ``next_opener``), which is
then also the first token of the next message the template renders.

Derived once per (template, special-token text it reads, template kwargs, date): ``turn_roles``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tito_audit.rendering.analysis import loaded_names
from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.control_words import (
    control_words,
    first_word,
    leading_words,
    rest,
    shared,
    spans,
    suffix_start,
)
from tito_audit.rollout.payload_words import inner_words, reasoning_words
from tito_audit.rollout.role_probe import (
    ANSWER_TEXT,
    ARGUMENT,
    NEXT_USER,
    RESULT,
    TOOL,
    USER,
    RoleProbe,
    Stopped,
    after,
    between,
    call_message,
)

AFTER_TURN = "after_turn"  # the template closes an assistant turn with a token of its own: engines stop on it
NEXT_OPENER = "next_opener"  # it writes nothing after the turn: engines stop on the next turn's opener


ANSWER, CALL = "answer", "call"  # the kinds of assistant turn: a final answer, a turn of tool calls
MIXED = "mixed"  # answers end one way, tool-call turns the other


@dataclass(frozen=True)
class TurnRoles:
    """A template's control text by role (see the module's docstring); empty where a probe did not render."""

    answer_end: str | None = None  # the control word an assistant answer ends with (the last of its closers)
    answer_closers: tuple[str, ...] = ()  # the control words that close an answer, in order (``<|END_RESPONSE|>``...)
    call_end: str | None = None  # the one a tool-call turn ends with
    deferred_end: str | None = None  # an answer's end that the template writes only once another message follows
    call_deferred_end: str | None = None  # the same after a tool-call turn
    user_end: str | None = None  # the control word a user turn ends with (None: it runs into the next opener)
    openers: tuple[str, ...] = ()  # user, tool, assistant turn openers (first control word of each), in that order
    next_openers: tuple[str, ...] = ()  # the openers of the turns that follow an assistant turn (user, tool)
    generation: tuple[str, ...] = ()  # control words of the generation prompt
    call_wrappers: tuple[str, ...] = ()  # before a call's name, and right before the call's turn end
    reasoning: tuple[str, ...] = ()  # around a reasoning payload
    start: tuple[str, ...] = ()  # before the first turn opener
    user_opener: str | None = None  # the opener of a user turn that follows an answer
    tool_opener: str | None = None  # the opener of a tool result that follows a call
    # Control words the template writes inside one assistant message, between two of its payloads (after its
    # reasoning, between parallel calls, between content and calls): ``</tool_call>``, gpt-oss's ``<|end|>``
    # between channels. None of them ends the turn, whatever it ends elsewhere: an engine stopping on one cuts
    # the message there.
    inner: tuple[str, ...] = ()

    def _ends(self, word: str | None) -> bool:
        return word is not None and word not in self.inner

    def convention_of(self, kind: str) -> str:
        """How a turn of ``kind`` (``ANSWER``, ``CALL``) ends: ``after_turn`` (on a control word of its own that the
        template writes nowhere inside an assistant message), ``next_opener`` (on the next turn's opener: a template
        that closes no turn, or that closes the other kind of turn but not this one: call turns running into the
        tool result's opener), or ``""`` (neither)."""
        own, other = self._closer(kind), self._closer(CALL if kind == ANSWER else ANSWER)
        if own:
            return AFTER_TURN
        opener = self.user_opener if kind == ANSWER else self.tool_opener
        return NEXT_OPENER if self._ends(opener) and (self.user_end is None or other) else ""

    def _closer(self, kind: str) -> str | None:
        """The closer of a turn of ``kind`` (written after it, or only once another message follows), or None."""
        ends = (self.answer_end, self.deferred_end) if kind == ANSWER else (self.call_end, self.call_deferred_end)
        return next((w for w in ends if self._ends(w)), None)

    def end_of(self, kind: str) -> str | None:
        """The control word a turn of ``kind`` ends with (its closer, or the next turn's opener), or None."""
        convention = self.convention_of(kind)
        if convention == NEXT_OPENER:
            return self.user_opener if kind == ANSWER else self.tool_opener
        return self._closer(kind)

    def closers_of(self, kind: str) -> tuple[str, ...]:
        """The control words that close a turn of ``kind``, in order, its end the last: an engine stopping on any of
        them stops within the turn's closing run, and the next message's delta starts after the one it stopped on
        (Command-R's answers: ``<|END_RESPONSE|>``, ``<|END_OF_TURN_TOKEN|>``)."""
        end = self.end_of(kind)
        if end is None:
            return ()
        if kind == ANSWER and self.convention_of(kind) == AFTER_TURN and end == self.answer_end and self.answer_closers:
            return self.answer_closers
        return (end,)

    @property
    def convention(self) -> str:
        """``after_turn``: the template ends assistant turns with a control word of its own; ``next_opener``: it
        ends no turn of any role, the next turn's opener does; ``mixed``: answers end one way, tool-call turns the
        other (``convention_of``); ``""``: neither (a template that ends user turns but never assistant turns:
        nothing in it says what an engine stops on)."""
        kinds = {self.convention_of(ANSWER), self.convention_of(CALL)} - {""}
        return kinds.pop() if len(kinds) == 1 else (MIXED if kinds else "")

    @property
    def turn_ends(self) -> tuple[str, ...]:
        """The control words an engine stops on, the answer's first."""
        return tuple(dict.fromkeys(w for w in (self.end_of(ANSWER), self.end_of(CALL)) if w))

    @property
    def words(self) -> tuple[str, ...]:
        """Every control word the template writes in a role position, once each, in a stable order."""
        ends = (self.answer_end, self.call_end, self.deferred_end, self.call_deferred_end, self.user_end)
        parts: tuple[tuple[str, ...], ...] = (self.start, self.openers, tuple(w for w in ends if w))
        parts = (*parts, self.answer_closers, self.generation, self.call_wrappers)
        return tuple(dict.fromkeys(w for part in (*parts, self.reasoning) for w in part))


def read_turn_roles(renderer: Renderer) -> TurnRoles:
    """``TurnRoles`` of ``renderer``'s template, from probe renders (uncached: see ``turn_roles``); empty for a
    template whose probe renders hit a limit or the sandbox."""
    try:
        return _read(RoleProbe(renderer))
    except Stopped:
        return TurnRoles()


@dataclass(frozen=True)
class _Regions:
    """The probe renders and the regions around their payloads that the roles are read from (None where a probe
    did not render)."""

    bare: str | None  # a user message, no tools
    asked: str | None  # a user message
    prompt: str | None  # a user message and the generation prompt
    answered: str | None  # a user message and an answer, the last message
    answer_tail: str | None  # what follows that answer
    to_user: str | None  # what follows an answer before the next user payload
    called: str | None  # a user message and a call turn, the last message
    call_messages: list[dict[str, Any]]  # that conversation (in the shape the template renders)
    call_tail: str | None  # what follows the call's argument
    to_tool: str | None  # what follows the call's argument before the tool result's payload


def _regions(probe: RoleProbe, user: dict[str, Any]) -> _Regions:
    """The probe renders, in a fixed order (a template's render budget is spent the same way on every read)."""
    answer = {"role": "assistant", "content": ANSWER_TEXT}
    bare = probe.render([user], tools=False)
    asked = probe.render([user])
    prompt = probe.render([user], agp=True)
    answered = probe.render([user, answer])
    then_user = probe.render([user, answer, {"role": "user", "content": NEXT_USER}])
    called, call_messages = probe.first(
        ARGUMENT, *([user, call_message(c, string=j)] for j in (False, True) for c in (None, ""))
    )
    result = {"role": "tool", "tool_call_id": "call00001", "name": TOOL, "content": RESULT}
    then_tool = probe.render([*call_messages, result])
    if then_tool is None:
        then_tool = probe.render([*call_messages, {"role": "user", "content": RESULT}])
    return _Regions(
        bare=bare,
        asked=asked,
        prompt=prompt,
        answered=answered,
        answer_tail=after(answered, ANSWER_TEXT) if answered else None,
        to_user=between(then_user, ANSWER_TEXT, NEXT_USER) if then_user else None,
        called=called,
        call_messages=call_messages,
        call_tail=after(called, ARGUMENT) if called else None,
        to_tool=between(then_tool, ARGUMENT, RESULT) if then_tool else None,
    )


def _read(probe: RoleProbe) -> TurnRoles:
    user = {"role": "user", "content": USER}
    r = _regions(probe, user)
    to_answer = between(r.answered, USER, ANSWER_TEXT) if r.answered else None
    user_next = first_word(to_answer or "")
    closers = _closers(r, user_next)
    generation, assistant_opener = _generation(r, closers, user_next)
    # Turn ends: what follows the payload of an assistant turn that is the last message.
    head = r.asked[: r.asked.find(USER)] if r.asked and USER in r.asked else ""
    openers_seen = {w for w in (assistant_opener, *control_words(head)[-1:]) if w}  # the assistant's, the user's
    answer_closers = _closing_run(r.answer_tail, r.to_user, openers_seen)
    answer_end = answer_closers[-1] if answer_closers else None
    call_end, call_wrappers = _call_end(r.call_tail, r.to_tool, answer_end, assistant_opener)
    if r.called and r.prompt:
        completion = rest(r.prompt, r.called)
        cut = [i for i in (completion.find(TOOL), completion.find(ARGUMENT)) if i >= 0]
        call_wrappers = (*control_words(completion[: min(cut)] if cut else ""), *call_wrappers)
    user_opener, deferred_end = _next_turn(r.answer_tail, r.to_user, closers, answer_end)
    tool_opener, call_deferred_end = _next_turn(r.call_tail, r.to_tool, closers, call_end)
    openers = tuple(dict.fromkeys(w for w in (user_opener, tool_opener, assistant_opener) if w))
    reasoning = reasoning_words(probe, user)
    return TurnRoles(
        answer_end=answer_end,
        answer_closers=answer_closers,
        call_end=call_end,
        deferred_end=deferred_end,
        call_deferred_end=call_deferred_end,
        user_end=user_next if user_next != assistant_opener else None,
        openers=openers,
        next_openers=tuple(dict.fromkeys(w for w in (user_opener, tool_opener) if w)),
        generation=generation,
        call_wrappers=tuple(dict.fromkeys(call_wrappers)),
        reasoning=reasoning,
        start=_start_words(r.bare, openers),
        user_opener=user_opener,
        tool_opener=tool_opener,
        inner=inner_words(probe, user, r.prompt, r.call_messages[-1]),
    )


def _closers(r: _Regions, user_next: str | None) -> set[str]:
    """Words that close turns: one that follows both a user and an assistant payload (``user_next``: the first after
    the user's), unless it opens every turn (then role text follows it, and it opens the first user turn too); and
    those that precede the second user turn but not the first (written only once another message follows)."""
    head = r.asked[: r.asked.find(USER)] if r.asked and USER in r.asked else None
    closers: set[str] = set()
    if user_next and user_next == first_word(r.to_user or "") and r.to_user is not None:
        leading = leading_words(None, r.to_user)
        if len(leading) > 1 or head is None or user_next not in head:
            closers.add(user_next)
    if r.to_user is not None and head is not None:
        closers |= set(control_words(r.to_user[: suffix_start(head, r.to_user)]))
    return closers


def _generation(r: _Regions, closers: set[str], user_next: str | None) -> tuple[tuple[str, ...], str | None]:
    """The generation prompt's control words, and the assistant's opener: its first word that closes nothing."""
    gen_text = rest(r.asked, r.prompt) if r.prompt and r.asked else ""
    leading = [w for w in leading_words(None, gen_text) if w not in closers]
    if not gen_text.strip() and r.prompt and USER in r.prompt:  # a template that writes its generation prompt anyway:
        gen_text = after(r.prompt, USER) or ""  # after the user's payload, so past what ends a user turn
        leading = [w for w in leading_words(None, gen_text) if w not in closers]
        leading = leading[1:] if len(leading) > 1 and leading[0] == user_next else leading
    return tuple(control_words(gen_text)), leading[0] if leading else None


def _next_turn(
    tail: str | None, following: str | None, closers: set[str], own_end: str | None
) -> tuple[str | None, str | None]:
    """What follows an assistant turn (``tail`` as the last message, ``following`` before the next payload): the
    next turn's opener (its first word that closes nothing), and the turn end the template writes only once another
    message follows (None where the turn has an end of its own, ``own_end``)."""
    words = leading_words(tail, following)
    opener = next((w for w in words if w not in closers), None)
    deferred = words[0] if words and words[0] in closers and not own_end else None
    return opener, deferred


def _start_words(bare: str | None, openers: tuple[str, ...]) -> tuple[str, ...]:
    """The control words before the first turn opener (``[gMASK]<sop>``, ``]~!b[``)."""
    if not (bare and openers):
        return ()
    head = bare[: bare.find(USER)] if USER in bare else bare
    first = min((head.find(w) for w in openers if w in head), default=-1)
    return tuple(control_words(head[:first])) if first > 0 else ()


def _closing_run(tail: str | None, following: str | None, openers: set[str]) -> tuple[str, ...]:
    """The control words that close an assistant turn, from ``tail`` (what follows its payload when it is the last
    message): its first control word (after any text the template writes there), then each that follows with only
    whitespace between, as long as the template writes it in ``following`` too (the turn followed by a user turn:
    an end it writes only when the turn is last, a final eos, is no turn end) and it opens no turn (``openers``: the
    assistant's, for a template that always ends its render with it; the word right before a user's text). Command-R's
    answer closes with ``<|END_RESPONSE|><|END_OF_TURN_TOKEN|>``; the turn ends at the last one, what its eos is."""
    text = tail or ""
    found = spans(text, runs=True)
    if not found:
        return ()
    run, end = [found[0][2]], found[0][1]
    limit = shared(text, following) if following is not None else end
    for a, b, word in found[1:]:
        if b > limit or text[end:a].strip() or word in openers:
            break
        run.append(word)
        end = b
    return tuple(run)


def _call_end(
    tail: str | None, to_tool: str | None, answer_end: str | None, opener: str | None = None
) -> tuple[str | None, tuple[str, ...]]:
    """A call turn's end and the wrapper word right before it, from what follows the call's last argument.

    The text both renders share (the call as the last message, and followed by its result) is the turn's own, up to
    the assistant's ``opener`` (a template that always ends its render with it); the answer's turn end there is the
    call's too, else its last control word is (a template that closes calls with another token), unless the
    template closes no turn at all."""
    if tail is None:
        return None, ()
    own = tail[: shared(to_tool, tail)] if to_tool is not None else tail
    words = [w for _, _, w in spans(own, runs=True)]
    if opener in words:
        words = words[: words.index(opener)]
    if not words:
        return None, ()
    if answer_end is not None and answer_end in words:
        at = len(words) - 1 - words[::-1].index(answer_end)
        return answer_end, tuple(words[at - 1 : at]) if at > 0 else ()
    if answer_end is None:
        return None, (words[-1],)  # no turn ends: the last word closes the call's wrapper
    return words[-1], tuple(words[-2:-1])


_MEMO = BoundedCache(limit=2048)


def turn_roles(renderer: Renderer) -> TurnRoles:
    """``read_turn_roles``, once per template and what it renders with: the special-token text it reads
    (``eos_token``...: a scan reads a template on one tokenizer, then audits it on another, which differs in little
    else), kwargs, date and tool schema."""
    tok = renderer.tokenizer
    try:
        names = sorted(n for n in loaded_names(renderer.chat_template) if n.endswith("_token"))
    except Exception:  # does not parse: every probe fails, whatever the key
        names = []
    key = (
        renderer.chat_template,
        tuple(str(getattr(tok, n, None)) for n in names),
        repr(sorted(renderer.template_kwargs.items())),
        renderer.date.isoformat(),
        renderer.tools_as[0] if renderer.tools_as else None,
    )
    hit = _MEMO.get(key)
    if hit is None:
        hit = _MEMO.put(key, read_turn_roles(renderer), len(renderer.chat_template))
    return hit
