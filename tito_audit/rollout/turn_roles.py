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

A control word is the extent of one such literal: a run of non-space text between brackets (``<``/``>``,
``[``/``]``, either way round, repeated or not: ``<|im_end|>``, ``<turn|>``, ``[e~[``, ``]~b]``, ``[|endofturn|]``,
``<<eot>>``) holding a letter or digit; where a turn ends or opens, also a space-delimited run between the same
markup character or a mirrored pair (``@@END@@``, ``{|end|}``). The role decides which words count, the shape only
where one ends, so ``<tools>`` in a system prompt's prose is no control token while ``<|channel>`` before reasoning
is.

A template with no turn end after an answer (GLM's ``<|assistant|>...`` runs straight into ``<|user|>``) closes
its turns with the next turn's opener: an engine stops on that opener (``convention`` ``next_opener``), which is
then also the first token of the next message the template renders.

Derived once per (template, special-token text it reads, template kwargs, date): ``turn_roles``.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.analysis import loaded_names
from tito_audit.rendering.bounded_cache import BoundedCache
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.probes import TOOLS
from tito_audit.rollout.tokens import common_prefix_len

# Payload markers: text no template writes by itself, alphanumeric so that no escaping or trimming changes it.
_USER, _NEXT_USER, _ANSWER = "Zq7user1", "Zq7user2", "Zq7answer"
_ARGUMENT, _RESULT, _THOUGHT = "Zq7argument", "Zq7result", "Zq7thought"
_SECOND = "Zq7second"  # a parallel call's argument
_TOOL = "get_weather"  # the probes' tool (``probes.TOOLS``)

AFTER_TURN = "after_turn"  # the template closes an assistant turn with a token of its own: engines stop on it
NEXT_OPENER = "next_opener"  # it writes nothing after the turn: engines stop on the next turn's opener

# A bracketed control word: a run of brackets (``<``/``>``, ``[``/``]``, either way round), text without brackets,
# quotes or spaces, a run of brackets.
_BRACKETED = re.compile(r"(?:<+|\[+|\]+)[^\s<>\[\]{}\"']{1,62}(?:>+|\[+|\]+)")
_RUN = re.compile(r"\S+")
_NOT_MARKUP = frozenset(".,:;!?-'\"()`*_=/\\")  # prose and markdown: ``User:``, ``(LLM)``, ``**Note**``


_PAIRED = {("Ps", "Pe"), ("Pi", "Pf"), ("Sm", "Sm")}  # opening/closing punctuation, quotes, ``<``/``>``


def _mirrored_pair(first: str, last: str) -> bool:
    """``first`` opens and ``last`` closes a bracket pair of any script (``{``/``}``, ``⟪``/``⟫``, ``«``/``»``,
    ``【``/``】``): two different bidi-mirrored characters, an opening and a closing one."""
    return (
        first != last
        and bool(unicodedata.mirrored(first))
        and bool(unicodedata.mirrored(last))
        and (unicodedata.category(first), unicodedata.category(last)) in _PAIRED
    )


def _delimited(run: str) -> bool:
    """A space-delimited run that reads as one control token of its own shape (``@@END@@``, ``{|end|}``, ``§eot§``):
    a letter or digit between the same markup character, or a mirrored pair, at both ends; no quote."""
    first, last = run[0], run[-1]
    return (
        3 <= len(run) <= 64
        and any(c.isalnum() for c in run)
        and not (first.isalnum() or first.isspace() or first in _NOT_MARKUP)
        and (last == first or _mirrored_pair(first, last))
        and not any(c in "\"'" for c in run)
    )


def _spans(text: str, start: int = 0, end: int | None = None, runs: bool = False) -> list[tuple[int, int, str]]:
    """Where the control words of ``text[start:end]`` are: the bracketed words of each space-delimited run, and with
    ``runs`` (where a turn ends or opens: no prose there) a whole run of its own shape (``_delimited``), each with a
    letter or digit."""
    end = len(text) if end is None else end
    out: list[tuple[int, int, str]] = []
    for run in _RUN.finditer(text, start, end):
        inner = [m for m in _BRACKETED.finditer(text, run.start(), run.end()) if any(c.isalnum() for c in m.group())]
        found = [(m.start(), m.end(), m.group()) for m in inner]
        if runs:  # the rest of the run around its bracketed words: ``</tool_call>⟪eot⟫``
            cuts = [run.start(), *(i for m in inner for i in (m.start(), m.end())), run.end()]
            found += [
                (a, b, text[a:b]) for a, b in zip(cuts[::2], cuts[1::2], strict=True) if b > a and _delimited(text[a:b])
            ]
        out += sorted(found)
    return out


def control_words(text: str) -> list[str]:
    """The control words in ``text`` (see the module's docstring), in order."""
    return [w for _, _, w in _spans(text)]


def _first_word(text: str, after_text: bool = False) -> str | None:
    """The control word ``text`` starts with (after whitespace), or None; with ``after_text`` its first control
    word after any plain text (a closer the template writes after a signature of its own: ``-- sent by bot
    <|im_end|>``)."""
    spans = _spans(text, runs=True)
    return spans[0][2] if spans and (after_text or not text[: spans[0][0]].strip()) else None


ANSWER, CALL = "answer", "call"  # the kinds of assistant turn: a final answer, a turn of tool calls
MIXED = "mixed"  # answers end one way, tool-call turns the other


@dataclass(frozen=True)
class TurnRoles:
    """A template's control text by role (see the module's docstring); empty where a probe did not render."""

    answer_end: str | None = None  # the control word an assistant answer ends with
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
        parts = (self.start, self.openers, tuple(w for w in ends if w), self.generation, self.call_wrappers)
        return tuple(dict.fromkeys(w for part in (*parts, self.reasoning) for w in part))


def _shared(a: str, b: str) -> int:
    """Where ``b`` departs from ``a``, moved back to the start of a control word it would cut (``<|channel>`` and
    ``<|tool_call>`` share ``<|``, no word)."""
    n = common_prefix_len(a, b)
    for at, to, _ in _spans(b, max(0, n - 64), n + 64):
        if at < n < to:
            return at
    return n


def _rest(a: str, b: str) -> str:
    """``b`` after what it shares with ``a`` (``_shared``)."""
    return b[_shared(a, b) :]


def _after(text: str, marker: str) -> str | None:
    at = text.rfind(marker)
    return None if at < 0 else text[at + len(marker) :]


def _between(text: str, first: str, then: str) -> str | None:
    at = text.rfind(first)
    if at < 0:
        return None
    end = text.find(then, at + len(first))
    return None if end < 0 else text[at + len(first) : end]


_STOPPING = ("timeout", "too_large", "security")  # render failures after which no probe is worth rendering


class _Stopped(Exception):
    """A probe render hit a limit or the sandbox."""


class _Probe:
    """The probe renders, in the first framing under which an answer renders (content as a string or as a list of
    text parts, with or without a system message first); a failing render is None."""

    FRAMINGS = ((False, False), (True, False), (False, True), (True, True))  # (content parts, system first)

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.tools = list(TOOLS)
        self.renders: dict[tuple[Any, ...], str | None] = {}  # the same probe is read for several roles
        self.parts, self.system = False, False
        answer = [{"role": "user", "content": _USER}, {"role": "assistant", "content": _ANSWER}]
        for parts, system in self.FRAMINGS:
            self.parts, self.system = parts, system
            if _ANSWER in (self.render(answer) or ""):
                return
        self.parts, self.system = False, False

    def framed(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [{"role": "system", "content": "Zq7system"}, *messages] if self.system else messages
        if self.parts:
            out = [
                {**m, "content": [{"type": "text", "text": m["content"]}]}
                if isinstance(m.get("content"), str) and m["content"]
                else m
                for m in out
            ]
        return out

    def render(self, messages: list[dict[str, Any]], agp: bool = False, tools: bool = True) -> str | None:
        key = (json.dumps(messages, sort_keys=True), agp, tools, self.parts, self.system)
        if key in self.renders:
            return self.renders[key]
        try:
            text: str | None = self.renderer.render(
                self.framed(messages), tools=self.tools if tools else None, add_generation_prompt=agp
            )
        except RenderError as err:
            if err.kind in _STOPPING:
                raise _Stopped from None  # a runaway or hostile template: no more probes (the audit classifies it)
            text = None
        self.renders[key] = text
        return text

    def first(self, marker: str, *conversations: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
        """The first of ``conversations`` whose render shows ``marker``, and it."""
        for messages in conversations:
            text = self.render(messages)
            if text is not None and marker in text:
                return text, messages
        return None, list(conversations[0])


def _call(
    content: Any,
    reasoning: str | None = None,
    string: bool = False,
    argument: str = _ARGUMENT,
    call_id: str = "call00001",
) -> dict[str, Any]:
    arguments: Any = {"city": argument}
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": _TOOL, "arguments": json.dumps(arguments) if string else arguments},
            }
        ],
    }
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return message


def read_turn_roles(renderer: Renderer) -> TurnRoles:
    """``TurnRoles`` of ``renderer``'s template, from probe renders (uncached: see ``turn_roles``); empty for a
    template whose probe renders hit a limit or the sandbox."""
    try:
        return _read(_Probe(renderer))
    except _Stopped:
        return TurnRoles()


def _read(probe: _Probe) -> TurnRoles:
    user = {"role": "user", "content": _USER}
    answer = {"role": "assistant", "content": _ANSWER}
    bare = probe.render([user], tools=False)
    asked = probe.render([user])
    prompt = probe.render([user], agp=True)

    # Turn ends: what follows the payload of an assistant turn that is the last message.
    answered = probe.render([user, answer])
    answer_tail = _after(answered, _ANSWER) if answered else None
    answer_end = _first_word(answer_tail, after_text=True) if answer_tail else None
    then_user = probe.render([user, answer, {"role": "user", "content": _NEXT_USER}])
    to_user = _between(then_user, _ANSWER, _NEXT_USER) if then_user else None

    called, call_messages = probe.first(
        _ARGUMENT, *([user, _call(c, string=j)] for j in (False, True) for c in (None, ""))
    )
    call_tail = _after(called, _ARGUMENT) if called else None
    result = {"role": "tool", "tool_call_id": "call00001", "name": _TOOL, "content": _RESULT}
    then_tool = probe.render([*call_messages, result])
    if then_tool is None:
        then_tool = probe.render([*call_messages, {"role": "user", "content": _RESULT}])
    to_tool = _between(then_tool, _ARGUMENT, _RESULT) if then_tool else None

    call_end, call_wrappers = _call_end(call_tail, to_tool, answer_end)
    if called and prompt:
        completion = _rest(prompt, called)
        cut = [i for i in (completion.find(_TOOL), completion.find(_ARGUMENT)) if i >= 0]
        call_wrappers = (*control_words(completion[: min(cut)] if cut else ""), *call_wrappers)

    # Closers and openers. A word that follows both a user and an assistant payload closes turns; so does one that
    # precedes the second user turn but not the first (written only once another message follows: ``deferred``).
    # The first other word after an assistant turn opens the next one; what follows a user payload before the
    # assistant's opener ends a user turn.
    to_answer = _between(answered, _USER, _ANSWER) if answered else None
    user_next, answer_next = _first_word(to_answer or ""), _first_word(to_user or "")
    head = asked[: asked.find(_USER)] if asked and _USER in asked else None
    closers: set[str] = set()
    if user_next and user_next == answer_next and to_user is not None:
        # the same word after both payloads: a closer, unless it opens every turn (then role text follows it, and
        # it opens the first user turn too)
        leading = _leading_words(None, to_user)
        if len(leading) > 1 or head is None or user_next not in head:
            closers.add(user_next)
    if to_user is not None and head is not None:
        closers |= set(control_words(to_user[: _suffix_start(head, to_user)]))
    gen_text = _rest(asked, prompt) if prompt and asked else ""
    leading = [w for w in _leading_words(None, gen_text) if w not in closers]
    if not gen_text.strip() and prompt and _USER in prompt:  # a template that writes its generation prompt anyway:
        gen_text = _after(prompt, _USER) or ""  # after the user's payload, so past what ends a user turn
        leading = [w for w in _leading_words(None, gen_text) if w not in closers]
        leading = leading[1:] if len(leading) > 1 and leading[0] == user_next else leading
    generation = tuple(control_words(gen_text))
    assistant_opener = leading[0] if leading else None
    user_end = user_next if user_next != assistant_opener else None
    words_u, words_t = _leading_words(answer_tail, to_user), _leading_words(call_tail, to_tool)
    user_opener = next((w for w in words_u if w not in closers), None)
    tool_opener = next((w for w in words_t if w not in closers), None)
    deferred_end = words_u[0] if words_u and words_u[0] in closers and not answer_end else None
    call_deferred_end = words_t[0] if words_t and words_t[0] in closers and not call_end else None
    openers = tuple(dict.fromkeys(w for w in (user_opener, tool_opener, assistant_opener) if w))
    next_openers = tuple(dict.fromkeys(w for w in (user_opener, tool_opener) if w))

    start: tuple[str, ...] = ()
    if bare and openers:
        head = bare[: bare.find(_USER)] if _USER in bare else bare
        first = min((head.find(w) for w in openers if w in head), default=-1)
        start = tuple(control_words(head[:first])) if first > 0 else ()

    reasoning = _reasoning_words(probe, user)
    return TurnRoles(
        answer_end=answer_end,
        call_end=call_end,
        deferred_end=deferred_end,
        call_deferred_end=call_deferred_end,
        user_end=user_end,
        openers=openers,
        next_openers=next_openers,
        generation=generation,
        call_wrappers=tuple(dict.fromkeys(call_wrappers)),
        reasoning=reasoning,
        start=start,
        user_opener=user_opener,
        tool_opener=tool_opener,
        inner=_inner_words(probe, user, prompt, call_messages[-1]),
    )


def _leading_words(tail: str | None, following: str | None) -> list[str]:
    """The control words ``following`` (what the template writes between an assistant turn's payload and the next
    payload) starts with after what it shares with ``tail`` (what it writes there when the turn is the last
    message), up to its first other text."""
    if following is None:
        return []
    at = _shared(tail or "", following)
    own = control_words(tail or "")
    if own and following.find(own[-1]) >= 0:  # past the tail's last word (a call's history form may differ before it)
        at = max(at, following.find(own[-1]) + len(own[-1]))
    words: list[str] = []
    for start, end, word in _spans(following, at, runs=True):
        if following[at:start].strip():
            break
        words.append(word)
        at = end
    return words


def _suffix_start(a: str, b: str) -> int:
    """Where the text ``b`` ends with what ``a`` ends with begins in ``b``, moved past a control word it would cut."""
    n = len(b) - common_prefix_len(a[::-1], b[::-1])
    for at, to, _ in _spans(b, max(0, n - 64), min(len(b), n + 64)):
        if at < n < to:
            return to
    return n


def _call_end(tail: str | None, to_tool: str | None, answer_end: str | None) -> tuple[str | None, tuple[str, ...]]:
    """A call turn's end and the wrapper word right before it, from what follows the call's last argument.

    The text both renders share (the call as the last message, and followed by its result) is the turn's own;
    the answer's turn end there is the call's too, else its last control word is (a template that closes calls
    with another token), unless the template closes no turn at all."""
    if tail is None:
        return None, ()
    own = tail[: _shared(to_tool, tail)] if to_tool is not None else tail
    words = [w for _, _, w in _spans(own, runs=True)]
    if not words:
        return None, ()
    if answer_end is not None and answer_end in words:
        at = len(words) - 1 - words[::-1].index(answer_end)
        return answer_end, tuple(words[at - 1 : at]) if at > 0 else ()
    if answer_end is None:
        return None, (words[-1],)  # no turn ends: the last word closes the call's wrapper
    return words[-1], tuple(words[-2:-1])


def _inner_words(probe: _Probe, user: dict[str, Any], prompt: str | None, call: dict[str, Any]) -> tuple[str, ...]:
    """Control words the template writes inside one assistant message, between two of its payloads: between
    parallel calls, after reasoning and before the answer or call (for a template whose source mentions reasoning
    at all). These are the shapes a model samples as one turn in any tool loop. Content next to calls is not among
    them: some templates write it as two turns when the message is the last (Nemotron Nano v2); their turn end stays
    the turn end, and the simulation names the message an engine would cut there. ``call``: a tool-call message in
    the shape the template renders."""
    string = isinstance(call["tool_calls"][0]["function"]["arguments"], str)
    parallel = _call(call["content"], string=string)
    parallel["tool_calls"] += _call(None, string=string, argument=_SECOND, call_id="call00002")["tool_calls"]
    messages: list[tuple[dict[str, Any], tuple[str, ...]]] = [(parallel, (_ARGUMENT, _SECOND))]
    if _mentions_reasoning(probe):
        messages += [
            ({"role": "assistant", "content": _ANSWER, "reasoning_content": _THOUGHT}, (_THOUGHT, _ANSWER)),
            (_call(call["content"], _THOUGHT, string), (_THOUGHT, _ARGUMENT)),
        ]
    words: list[str] = []
    for message, markers in messages:
        text = probe.render([user, message])
        if text is None:
            continue
        completion = _rest(prompt, text) if prompt else text
        at = sorted((completion.find(m), m) for m in markers if m in completion)
        if len(at) == len(markers):
            words += [w for _, _, w in _spans(completion, at[0][0] + len(at[0][1]), at[-1][0], runs=True)]
    return tuple(dict.fromkeys(words))


def _mentions_reasoning(probe: _Probe) -> bool:
    source = probe.renderer.chat_template.lower()
    return any(w in source for w in ("think", "reason", "thought", "analysis"))


def _reasoning_words(probe: _Probe, user: dict[str, Any]) -> tuple[str, ...]:
    """Control words around a reasoning payload, on an answer and on a tool call (for a template whose source
    mentions reasoning at all: any other renders none)."""
    words: list[str] = []
    if not _mentions_reasoning(probe):
        return ()
    prompt = probe.render([user], agp=True) or ""
    for message in (
        {"role": "assistant", "content": _ANSWER, "reasoning_content": _THOUGHT},
        _call(None, _THOUGHT),
    ):
        text = probe.render([user, message])
        if text is None or _THOUGHT not in text:
            continue
        completion = _rest(prompt, text)
        at = completion.find(_THOUGHT)
        ends = [i for i in (completion.find(_ANSWER), completion.find(_TOOL), completion.find(_ARGUMENT)) if i > at]
        words += control_words(completion[:at])
        words += control_words(completion[at + len(_THOUGHT) : min(ends) if ends else len(completion)])
    return tuple(dict.fromkeys(words))


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
