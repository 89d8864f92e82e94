"""How a template carries reasoning, and the other message fields it reads: derived from its code and renders.

Scenarios write reasoning in ``reasoning_content`` (and inline between ``<think>`` tags in ``inline_think``). A
template may read another field (``thinking``, ``reasoning``) or write other delimiters (``[THINK]``,
``<thought>``, ``<seed:think>``, a ``<|channel>thought`` block, harmony's analysis channel). Played with a fixed
field and tag, such a template never sees reasoning in a form it strips, and its rewrite goes unseen. So
``derive_reasoning`` reads what the template's code reads from messages and the literals it tests text with
(``rendering.message_reads``), and renders small probes:

- every message key beyond the standard ones, with a value, on answers and tool-call turns (an earlier and the
  last one) and on system, user and tool messages: where the value shows;
- every delimiter pair the template tests text with (``</x>``/``<x>``, ``[/X]``/``[X]``, ``<x|>``/``<|x>``...),
  around reasoning in an assistant's content, on an earlier and the last turn.

From those renders, never from a name: the reasoning field (a key whose value shows on an assistant turn before
what the turn says, ``reasoning_content`` first) and how the template writes it (the literals around the value),
or an inline pair; whether reasoning shows on answers and on tool-call turns; the other fields to play
(``fields``); and what no scenario exercises (``not_probed``), which the verdict names instead of passing it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.analysis import message_reads, template_literals
from tito_audit.rendering.renderer import Renderer
from tito_audit.report.finding_class import ReasoningMarks
from tito_audit.scenarios.spec import Message

STANDARD_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})  # what every scenario sends
SCENARIO_FIELD = "reasoning_content"  # where scenarios write reasoning (renamed to the field the template reads)
ROLES = ("assistant", "user", "tool", "system")
_MAX_PAIRS = 4  # delimiter pairs probed inline (a template tests few)
_MAX_KEYS = 24  # message keys probed one by one when probing them together fails

# A closing delimiter and how its opening one is spelled: </x> <x>, [/X] [X], <|/x|> <|x|>, <x|> <|x> (the opener
# need not be written: a generation prompt may leave it to the model), and an "end" in the name that is a "begin"
# or "start" in an opener the template writes (<|end_of_thought|>, <｜end▁of▁thinking｜>).
_Spelling = Callable[[re.Match[str]], list[str]]
_CLOSERS: tuple[tuple[re.Pattern[str], _Spelling, bool], ...] = (
    (re.compile(r"^</([^<>\s/]+)>$"), lambda m: [f"<{m[1]}>"], False),
    (re.compile(r"^\[/([^\[\]\s/]+)\]$"), lambda m: [f"[{m[1]}]"], False),
    (re.compile(r"^<\|/([^|<>\s]+)\|>$"), lambda m: [f"<|{m[1]}|>"], False),
    (re.compile(r"^<([^|<>\s]+)\|>$"), lambda m: [f"<|{m[1]}>"], False),
    (
        re.compile(r"^(.*?)(end|END|End)(.*)$"),
        lambda m: [f"{m[1]}{w}{m[3]}" for w in ("begin", "start", "BEGIN", "START", "Begin", "Start")],
        True,
    ),
)


@dataclass(frozen=True)
class Reasoning:
    """How reasoning reaches a template's render, and the other message fields it reads.

    ``mode``: ``field`` (the value of ``field`` renders), ``inline`` (only reasoning inline in content between the
    delimiters renders), ``emitted`` (the template strips the delimiters even on the last turn: the model emits what
    the template never shows) or ``""`` (no reasoning reaches the render). ``written``: the delimiters as the
    template writes them around reasoning (``'\\n<think>\\n'``, ``'\\n</think>\\n\\n'``); ``tags`` the same
    stripped. ``on_answers``/``on_calls``: the field renders on a final answer / a tool-call turn as the last
    message (where it does not, the model still emits reasoning, in the template's delimiters). ``fields``: other
    keys whose value renders, each with the roles it renders for. ``not_probed``: what the template reads that no
    scenario exercises (``reasoning:...``, ``field:KEY``).
    """

    mode: str = ""
    field: str = SCENARIO_FIELD
    written: tuple[str, str] = ("<think>\n", "\n</think>\n\n")
    on_answers: bool = True
    on_calls: bool = True
    fields: tuple[tuple[str, tuple[str, ...]], ...] = ()
    not_probed: tuple[str, ...] = ()

    @property
    def tags(self) -> tuple[str, str]:
        return (self.written[0].strip(), self.written[1].strip())

    @property
    def emits(self) -> tuple[str, str] | None:
        """The delimiters the model writes reasoning in where the template does not show it (None: it always does,
        or no delimiters are known)."""
        if self.mode == "emitted" or (self.mode == "field" and not (self.on_answers and self.on_calls)):
            return self.written if all(self.tags) else None
        return None


def delimiter_pairs(tested: Iterable[str], literals: str) -> list[tuple[str, str]]:
    """(opener, closer) pairs among the literals a template tests text with: ``</think>`` with ``<think>``,
    ``[/THINK]`` with ``[THINK]``, ``<channel|>`` with ``<|channel>``."""
    pairs: list[tuple[str, str]] = []
    for text in tested:
        lit = text.strip()
        for closer, openers, written in _CLOSERS:
            m = closer.match(lit)
            if m is None:
                continue
            opener = next((o for o in openers(m) if o != lit and (o in literals or not written)), None)
            if opener is not None and (opener, lit) not in pairs:
                pairs.append((opener, lit))
                break
    return pairs


def derive_reasoning(
    renderer: Renderer,
    tools: Any,
    shape: Callable[[list[Message]], list[Message]],
    modes: Sequence[dict[str, Any]] = (),
) -> Reasoning:
    """How reasoning and other message fields reach this template's render (see the module docstring).

    ``shape``: the conversation shape the template accepts (``Shapes.apply`` without reasoning), applied to every
    probe. ``modes``: other template kwargs the scenarios are played under (thinking switches): a key that shows
    under none of the default renders is looked for under them. Templates that read no message key beyond the
    standard ones and test no delimiter render nothing here; a renderer without template source (a library's) is
    probed with ``reasoning_content`` alone."""
    reads = message_reads(renderer.chat_template)
    keys = sorted((k for k in reads.message_keys if k not in STANDARD_KEYS), key=lambda k: (k != SCENARIO_FIELD, k))
    if not renderer.chat_template:  # a renderer with no template source (a library's): its renders alone decide
        keys = [SCENARIO_FIELD]
    literals = template_literals(renderer.chat_template)
    pairs = delimiter_pairs(reads.tested_literals, "\n".join(literals))
    if not keys and not pairs:
        return Reasoning()
    probe, shown = _shown_keys(renderer, tools, shape, keys, modes)
    not_probed = [f"field:{k}" for k in keys if k not in shown]
    field = probe.reasoning_field(shown, literals)
    written = _written(probe, shown[field], field, literals) if field is not None else ("", "")
    others, replacing = _other_fields(probe, keys, field, shown, written, literals)
    not_probed += [f"replaces:{k}" for k in replacing]
    if field is not None:
        on_answers, on_calls = "a2" in shown[field], "c2" in shown[field]
        if not (on_answers and on_calls) and not all(w.strip() for w in written):
            not_probed.append("reasoning:" + ("answers" if not on_answers else "tool_calls"))
        return Reasoning("field", field, written, on_answers, on_calls, others, tuple(not_probed))
    found = _inline_reasoning(probe, pairs, others, list(not_probed))
    if found.mode:
        return found
    # Not treated in the default mode (written as sent, or not rendered): a thinking switch may be what turns the
    # treatment on (Hermes-4's ``thinking`` strips every turn's block, the last one's too). The first mode that
    # treats a pair gives the form for every mode: the scenarios then emit reasoning in the others too, where a
    # template that ignores the reasoning field loses what a loop's reasoning parser took out of the content.
    for kwargs in modes:
        if kwargs:
            under_mode = _Probe(renderer.with_kwargs(**kwargs), tools, shape, keys)
            under = _inline_reasoning(under_mode, pairs, others, list(not_probed))
            if under.mode:
                return under
    return found


def _shown_keys(
    renderer: Renderer,
    tools: Any,
    shape: Callable[[list[Message]], list[Message]],
    keys: Sequence[str],
    modes: Sequence[dict[str, Any]],
) -> tuple[_Probe, dict[str, dict[str, str]]]:
    """Where each key shows (``_Probe.keys``): in the default renders, and a key that shows in none of them under
    each of ``modes`` in turn. Returns the last probe rendered (the one later readings use) and the slots."""
    probe = _Probe(renderer, tools, shape, keys)
    shown = probe.keys()
    for kwargs in modes:
        hidden = [k for k in keys if k not in shown]
        if not kwargs or not hidden:
            continue
        probe = _Probe(renderer.with_kwargs(**kwargs), tools, shape, keys)
        shown.update((k, v) for k, v in probe.keys(hidden).items() if k in hidden)
    return probe, shown


def _written(probe: _Probe, where: dict[str, str], field: str, literals: Sequence[str]) -> tuple[str, str]:
    """The literals the template writes around the reasoning field's value, read on the last answer or call turn
    where it shows, else an earlier one."""
    slot = next(s for s in ("a2", "c2", "a1", "c1") if s in where)
    return _around(where[slot], probe.bare(slot), probe.sentinel(field, slot), literals)


def _other_fields(
    probe: _Probe,
    keys: Sequence[str],
    field: str | None,
    shown: dict[str, dict[str, str]],
    written: tuple[str, str],
    literals: Sequence[str],
) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], list[str]]:
    """The other keys to play, each with the roles it renders for, and the keys that replace a standard part.

    Not another name for the reasoning field (one the template reads as ``reasoning or reasoning_content``,
    written between the same delimiters). A key whose value takes the place of what the turn says
    (``function_calls`` instead of its tool calls) is another spelling of a standard part, not a field of its
    own: played, it would read as the part dropped; it is returned apart, for ``not_probed``."""
    others_all = [
        (k, roles)
        for k in keys
        if k != field and (roles := _roles(shown.get(k, {}))) and not _same_block(probe, shown[k], k, written, literals)
    ]
    replacing = [k for k, roles in others_all if "assistant" in roles and probe.replaces(k, shown[k])]
    return tuple((k, roles) for k, roles in others_all if k not in replacing), replacing


def _inline_reasoning(
    probe: _Probe,
    pairs: Sequence[tuple[str, str]],
    others: tuple[tuple[str, tuple[str, ...]], ...],
    not_probed: list[str],
) -> Reasoning:
    """Reasoning inline in content, between the first delimiter pair (of at most ``_MAX_PAIRS``) the template
    treats; a pair neither probe renders is named as not probed."""
    for opener, closer in pairs[:_MAX_PAIRS]:
        mode = probe.inline(opener, closer)
        if mode == "failed":
            not_probed.append(f"reasoning:{closer}")
        elif mode:
            written = (f"{opener}\n", f"\n{closer}\n\n")
            return Reasoning(mode, SCENARIO_FIELD, written, fields=others, not_probed=tuple(not_probed))
    return Reasoning(fields=others, not_probed=tuple(not_probed))


def _same_block(
    probe: _Probe, where: dict[str, str], key: str, written: tuple[str, str], literals: Sequence[str]
) -> bool:
    slot = next((s for s in ("a2", "c2", "a1", "c1") if s in where), None)
    if slot is None or not all(written):
        return False
    return _around(where[slot], probe.bare(slot), probe.sentinel(key, slot), literals) == written


def _roles(where: dict[str, str]) -> tuple[str, ...]:
    """The roles a key's value renders for, from the probe slots it showed in."""
    firsts = {slot[0] for slot in where}
    out = ["assistant"] if firsts & {"a", "c"} else []
    return (*out, *(role for role in ("system", "user", "tool") if role[0] in firsts))


def _around(text: str, bare: str | None, sentinel: str, literals: Sequence[str]) -> tuple[str, str]:
    """The template's literals written right before and right after ``sentinel`` in ``text`` (``""`` where none
    fits): of those that fit, the longest that the value brought into the render (more of it in ``text`` than in
    ``bare``, the same render without the value: ``'\\n<think>\\n'``, not the role header before it), else the
    longest on one line (``<think>`` of an empty ``<think></think>`` the template writes anyway, not a role header
    that ends with it, nor a one-character piece of a concatenation)."""
    at = text.find(sentinel)
    before, after = text[:at], text[at + len(sentinel) :]
    fits = [lit for lit in dict.fromkeys(literals) if len(lit.strip()) > 1]  # not one character of a concatenation

    def pick(side: list[str]) -> str:
        brought = [lit for lit in side if bare is not None and text.count(lit) > bare.count(lit)]
        if brought:
            return max(brought, key=len)
        return max((lit for lit in side if "\n" not in lit.strip()), key=len, default="")

    return pick([lit for lit in fits if before.endswith(lit)]), pick([lit for lit in fits if after.startswith(lit)])


# Slots of the key probes: a1/a2 an earlier/the last answer, c1/c2 an earlier/the last tool-call turn,
# s/u/t a system, user, tool message.
_ANSWER = {"a1": "Hello there.", "a2": "Sure thing."}
_CITY = {"c1": "Oslo", "c2": "Lima"}  # each call turn's argument: what the turn says
_CALL_NAME = "get_weather"
_SAID = "Checking the weather."  # what a tool-call turn of the inline probe says after its reasoning


class _Probe:
    """The probe renders of one template: each key's value on every role, each delimiter pair inline."""

    def __init__(
        self, renderer: Renderer, tools: Any, shape: Callable[[list[Message]], list[Message]], keys: Sequence[str]
    ) -> None:
        self.renderer, self.tools, self.shape = renderer, tools, shape
        self.keys_read = list(keys)
        self.index = {k: i for i, k in enumerate(keys)}
        self._bare: dict[int, str | None] = {}

    def sentinel(self, key: str, slot: str) -> str:
        return f"Zq{self.index[key]}k{slot}"

    def bare(self, slot: str) -> str | None:
        """The probe conversation of ``slot`` rendered without any key set (None where it does not render)."""
        kind = next(n for n, (slots, _) in enumerate(self._conversations(())) if slot in slots)
        if kind not in self._bare:
            self._bare[kind] = self._render(self._conversations(())[kind][1])
        return self._bare[kind]

    def _values(self, slot: str, only: Sequence[str] | None) -> dict[str, str]:
        return {key: self.sentinel(key, slot) for key in (self.keys_read if only is None else only)}

    def _render(self, messages: list[Message]) -> str | None:
        try:
            return self.renderer.render(self.shape(messages), tools=self.tools)
        except RenderError:
            return None

    def _conversations(self, only: Sequence[str] | None = None) -> list[tuple[tuple[str, ...], list[Message]]]:
        """The three probe conversations (answers, tool-call turns, other roles), every key set on every message."""

        def call(n: int) -> list[dict[str, Any]]:
            fn = {"name": _CALL_NAME, "arguments": {"city": _CITY[f"c{n}"]}}
            return [{"id": f"call{n:05d}", "type": "function", "function": fn}]

        result: Message = {"role": "tool", "tool_call_id": "call00001", "name": _CALL_NAME, "content": "cold"}
        answers: list[Message] = [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": _ANSWER["a1"], **self._values("a1", only)},
            {"role": "user", "content": "More?"},
            {"role": "assistant", "content": _ANSWER["a2"], **self._values("a2", only)},
        ]
        calls: list[Message] = [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": call(1), **self._values("c1", only)},
            result,
            {"role": "assistant", "content": None, "tool_calls": call(2), **self._values("c2", only)},
        ]
        others: list[Message] = [
            {"role": "system", "content": "Be brief.", **self._values("s", only)},
            {"role": "user", "content": "Weather?", **self._values("u", only)},
            {"role": "assistant", "content": None, "tool_calls": call(1)},
            {**result, **self._values("t", only)},
            {"role": "assistant", "content": "Cold."},
        ]
        return [(("a1", "a2"), answers), (("c1", "c2"), calls), (("s", "u", "t"), others)]

    def keys(self, only: Sequence[str] | None = None) -> dict[str, dict[str, str]]:
        """Where each key (of ``only``, default all) shows: slot -> the render it shows in. Every key is set at once;
        a key that does not show is tried alone in a conversation that failed with every key set (its value can
        break a template that expects a list there) or in which another key showed (one can hide it: ``reasoning
        or reasoning_content``)."""
        shown: dict[str, dict[str, str]] = {}
        keys = self.keys_read if only is None else list(only)
        for slots, messages in self._conversations(only):
            text = self._render(messages)
            if text is not None:
                for key in keys:
                    self._found(shown, key, slots, text)
            if len(keys) < 2 or (text is not None and not any(set(slots) & set(shown.get(k, ())) for k in keys)):
                continue
            for key in [k for k in keys if not set(slots) & set(shown.get(k, ()))][:_MAX_KEYS]:
                drop = set(keys) - {key}
                alone = self._render([{k: v for k, v in m.items() if k not in drop} for m in messages])
                if alone is not None:
                    self._found(shown, key, slots, alone)
        return shown

    def _found(self, shown: dict[str, dict[str, str]], key: str, slots: Sequence[str], text: str) -> None:
        for slot in slots:
            if self.sentinel(key, slot) in text:
                shown.setdefault(key, {})[slot] = text

    def replaces(self, key: str, where: dict[str, str]) -> bool:
        """``key``'s value shows on an assistant turn whose own text (its answer, its call's argument) does not, with
        ``key`` set alone."""
        for slot in ("a2", "c2", "a1", "c1"):
            said = _ANSWER[slot] if slot[0] == "a" else _CITY[slot]
            if slot not in where or said in where[slot]:
                continue
            messages = next(ms for sl, ms in self._conversations([key]) if slot in sl)
            alone = self._render(messages)
            if alone is not None and self.sentinel(key, slot) in alone and said not in alone:
                return True
        return False

    def reasoning_field(self, shown: dict[str, dict[str, str]], literals: Sequence[str]) -> str | None:
        """The key that carries reasoning: one whose value shows on an assistant turn before what the same turn says
        (its answer, its call's argument, which must still show): ``reasoning_content`` (the scenarios' own field)
        first, another key only where the template writes its value as a block, between literals on both sides
        (not a header line such as GLM-4's ``metadata``)."""
        for key in self.keys_read:
            for slot, text in shown.get(key, {}).items():
                if slot[0] not in "ac":
                    continue
                said = _ANSWER[slot] if slot[0] == "a" else _CITY[slot]
                at, said_at = text.find(self.sentinel(key, slot)), text.rfind(said)
                if said_at == -1 or at > said_at:  # before what the turn says, which still shows
                    continue
                if key == SCENARIO_FIELD:
                    return key
                if all(w.strip() for w in _around(text, self.bare(slot), self.sentinel(key, slot), literals)):
                    return key
        return None

    def inline(self, opener: str, closer: str) -> str:
        """How the template treats reasoning inline between ``opener`` and ``closer``, on answers and on tool-call
        turns (a template may strip it from earlier call turns only): ``emitted`` (stripped even on the last turn),
        ``inline`` (kept on the last turn, dropped or rewritten on an earlier one), ``""`` (written as it was sent
        on both kinds of turn: not treated) or ``failed`` (neither probe renders)."""

        def block(n: int) -> str:
            return f"{opener}\nZqthought{n}\n{closer}\n\n"

        def call(n: int) -> list[dict[str, Any]]:
            fn = {"name": _CALL_NAME, "arguments": {"city": _CITY[f"c{n}"]}}
            return [{"id": f"call{n:05d}", "type": "function", "function": fn}]

        answers = [f"{block(1)}{_ANSWER['a1']}", f"{block(2)}{_ANSWER['a2']}"]
        calls = [f"{block(3)}{_SAID}", f"{block(4)}{_SAID}"]  # text after the block: the turn's content still shows
        probes: tuple[tuple[list[str], list[Message]], ...] = (
            (
                answers,
                [
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": answers[0]},
                    {"role": "user", "content": "More?"},
                    {"role": "assistant", "content": answers[1]},
                ],
            ),
            (
                calls,
                [
                    {"role": "user", "content": "Weather?"},
                    {"role": "assistant", "content": calls[0], "tool_calls": call(1)},
                    {"role": "tool", "tool_call_id": "call00001", "name": _CALL_NAME, "content": "cold"},
                    {"role": "assistant", "content": calls[1], "tool_calls": call(2)},
                ],
            ),
        )
        modes = []
        for sent, messages in probes:
            text = self._render(messages)
            if text is None:
                continue
            earlier, last = (s.split("\n")[1] for s in sent)
            if sent is calls and text.count(_SAID) < 2:  # content on call turns not shown as sent: not reasoning's
                continue
            if last not in text:
                modes.append("emitted")
            elif earlier not in text or not all(s in text for s in sent):
                modes.append("inline")
            else:
                modes.append("")
        if not modes:
            return "failed"
        return "inline" if "inline" in modes else "emitted" if "emitted" in modes else ""


@lru_cache(maxsize=16)
def _tested_pairs(template: str) -> tuple[tuple[str, str], ...]:
    """``delimiter_pairs`` of a template, read once per template (replay asks for every episode)."""
    return tuple(delimiter_pairs(message_reads(template).tested_literals, "\n".join(template_literals(template))))


def reasoning_marks(
    template: str,
    messages: Iterable[Message] | None = None,
    reasoning: Reasoning | None = None,
    stops: Iterable[str] = (),
) -> ReasoningMarks:
    """What reasoning looks like in a conversation under ``template``, for finding classes: the delimiters it reads
    reasoning in (``reasoning``'s, derived with renders, else every pair the template tests text with; none that is a
    stop token's text, which ends every turn), and the reasoning ``messages`` carry (the text of every key the
    template reads beyond the standard ones on an assistant message, and what sits between delimiters in its
    content)."""
    reads = message_reads(template)
    if reasoning is not None:
        pairs = [reasoning.tags] if reasoning.mode and all(reasoning.tags) else []
    else:
        pairs = list(_tested_pairs(template))
    stop_texts = set(stops)
    delimiters = tuple(dict.fromkeys(d for pair in pairs for d in pair if d and d not in stop_texts))
    texts: list[str] = []
    keys = [k for k in reads.message_keys if k not in STANDARD_KEYS]
    for m in messages or ():
        if m.get("role") != "assistant":
            continue
        texts += [v for k in keys if isinstance(v := m.get(k), str) and v.strip()]
        content = m.get("content")
        for opener, closer in pairs:
            if isinstance(content, str) and opener in content and closer in content:
                inner = content.split(opener, 1)[1].split(closer, 1)[0].strip()
                if inner:
                    texts.append(inner)
    return ReasoningMarks(delimiters, tuple(dict.fromkeys(texts)))
