"""What replaying a log needs from the model, built once per process (``ReplayContext``): the renderer (with the
replay's render limits, ``--date``), the stop, special and BOS ids, the tokenizer's size, the control tokens the
template opens a conversation with (which tell a log of this tokenizer from another's), and which per-episode work
beyond the TITO check is switched on.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.rendering.guard import REPLAY_LIMITS
from tito_audit.rendering.renderer import Renderer
from tito_audit.replay.drift import date_positions
from tito_audit.replay.next_message import NextMessage, plain_decode
from tito_audit.replay.schema import Episode, RecordError
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.rollout.turn_roles import turn_roles

_MARK_PROBES: tuple[list[dict[str, Any]], ...] = (
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
)


@dataclass
class ReplayContext:
    """Everything the analysis needs from the model, built once per process.

    ``whatif``, ``drift`` and ``noncanonical`` switch the per-episode work beyond the TITO check: with all three
    off, an episode with engine prompts costs a few slice comparisons (no render, no tokenizer call)."""

    renderer: Renderer
    stop_ids: list[int]
    special_ids: list[int]
    bos_id: int | None
    whatif: bool = True
    drift: bool = True
    noncanonical: bool = True
    bos_ids: tuple[int, ...] = ()  # every id that begins a sequence: the tokenizer's own and the template's
    vocab_size: int | None = None  # ids at or above it are outside the tokenizer
    marks: frozenset[int] = frozenset()  # control ids the template opens a conversation with
    date: dt.datetime | None = None  # the date renders see when a record does not say (--date)
    dated: bool = False  # the template's prompt shows the render date
    model: str = ""
    control_ids: frozenset[int] = frozenset()  # the tokenizer's control tokens (special ids)
    header_ids: frozenset[int] = frozenset()  # control ids the template opens a message with, never in a sampled turn
    # how the template writes a message before an assistant turn: (its control ids, its end) (``message_openings``)
    openings: tuple[tuple[frozenset[int], tuple[int, ...]], ...] = ()
    next_message: NextMessage | None = None  # how the template's next message shows after a turn (``next_message``)

    @classmethod
    def from_model(
        cls,
        model: Any,
        whatif: bool = True,
        *,
        drift: bool = True,
        noncanonical: bool = True,
        date: dt.datetime | None = None,
    ) -> ReplayContext:
        renderer = Renderer(model.tokenizer, model.chat_template, limits=REPLAY_LIMITS)
        if date is not None:
            renderer = renderer.with_date(date)
        stops = list(stop_token_ids(model.tokenizer, renderer, getattr(model, "generation_eos_ids", None) or ()))
        tok = model.tokenizer
        following = replace(next_message(renderer, stops), decode=plain_decode(tok))
        return cls(
            renderer,
            stops,
            sorted(set(tok.all_special_ids or [])),
            tok.bos_token_id,
            whatif,
            drift,
            noncanonical,
            bos_ids=beginning_ids(tok, renderer),
            vocab_size=len(tok),
            marks=template_marks(renderer),
            date=date,
            dated=date_positions(renderer, _MARK_PROBES[0], None) is not None,
            model=getattr(model, "name", ""),
            control_ids=control_ids(tok),
            header_ids=header_ids(renderer, stops),
            openings=message_openings(renderer, stops),
            next_message=following,
        )

    def decode(self, ids: Sequence[int]) -> str:
        return self.renderer.decode(list(ids), skip_special_tokens=False)

    def compare_kwargs(self) -> dict[str, Any]:
        return dict(
            decode=self.decode,
            stop_ids=self.stop_ids,
            special_ids=self.special_ids,
            bos_id=self.bos_id,
            bos_ids=self.bos_ids,
        )

    def renderer_for(self, ep: Episode) -> Renderer:
        """The renderer the engine used for this episode: its template kwargs and date, when the record has them."""
        r = self.renderer.with_kwargs(**ep.template_kwargs) if ep.template_kwargs else self.renderer
        return r.with_date(ep.date) if ep.date is not None else r

    def check_ids(self, ep: Episode) -> None:
        """``RecordError`` for an id this tokenizer does not have (the log was written with another one)."""
        if self.vocab_size is None:
            return
        for where, ids in (("input_ids", ep.input_ids), *((f"turns[{k}].ids", t.ids) for k, t in enumerate(ep.turns))):
            if ids and max(ids) >= self.vocab_size:
                raise RecordError(
                    f"{where} holds id {max(ids)}, outside {self.model or 'the model'}'s tokenizer "
                    f"({self.vocab_size} ids): was the log written with another tokenizer?"
                )


def beginning_ids(tokenizer: Any, renderer: Renderer) -> tuple[int, ...]:
    """The ids a sequence begins with: what the tokenizer itself adds in front of a text, its ``bos_token``, and
    the first id of the template's rendering when that is the ``bos_token`` it printed."""
    out: list[int] = []
    plain = renderer.encode("x")
    added = renderer.encode("x", add_special_tokens=True)
    if len(added) > len(plain) and added[len(added) - len(plain) :] == plain:
        out.extend(added[: len(added) - len(plain)])
    if tokenizer.bos_token_id is not None:
        out.append(int(tokenizer.bos_token_id))
    bos_text = tokenizer.bos_token
    if isinstance(bos_text, str) and bos_text:
        try:
            text = renderer.render(_MARK_PROBES[0], add_generation_prompt=True)
        except RenderError:
            text = ""
        if text.startswith(bos_text):
            first = renderer.encode(text)[:1]
            out.extend(first)
    return tuple(dict.fromkeys(out))


def control_ids(tokenizer: Any) -> frozenset[int]:
    """The tokenizer's control tokens: its special ids and its added tokens marked special."""
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    return frozenset(tokenizer.all_special_ids or []) | {i for i, t in added.items() if t.special}


def next_message(renderer: Renderer, stop_ids: Sequence[int]) -> NextMessage:
    """How the template's next message shows in the ids after an assistant turn (``replay.next_message``, without its
    ``decode``): the control ids and the first line of text it writes between an answer and the next user message,
    and between a call and its tool result, less the stops, read from probe renders; and the words it opens and ends
    turns with (``rollout.turn_roles``). ``known`` where any of that is more than the stop words."""
    tok = renderer.tokenizer
    control, stops = control_ids(tok), set(stop_ids)
    stop_texts = [t for t in (tok.decode([i], skip_special_tokens=False) for i in stop_ids) if t]
    headers: set[int] = set()
    openers: list[str] = []
    for probe, payload in ((_NEXT_USER, "Again"), (_TOOL_PROBE, "cold")):
        try:
            delta = _appended_ids(renderer, probe)
            before = renderer.render(probe[:-1])
            after = renderer.render(probe, add_generation_prompt=True)
        except RenderError:
            continue
        headers.update(i for i in delta or () if i in control and i not in stops)
        if after.startswith(before) and payload in after[len(before) :]:
            head = after[len(before) :].split(payload, 1)[0]
            for text in stop_texts:
                head = head.replace(text, "")
            line = next((part.strip() for part in head.splitlines() if part.strip()), "")
            if line:
                openers.append(line)
    roles = turn_roles(renderer)
    words = [*roles.next_openers, *roles.openers, *roles.turn_ends, *([roles.user_end] if roles.user_end else [])]
    telling = [*openers, *(w for w in words if w and w not in stop_texts)]
    found = tuple(dict.fromkeys([*openers, *(w for w in words if w)]))
    return NextMessage(frozenset(headers), found, bool(headers or telling))


_NEXT_USER: list[dict[str, Any]] = [*_MARK_PROBES[1], {"role": "user", "content": "Again"}]


def header_ids(renderer: Renderer, stop_ids: Sequence[int]) -> frozenset[int]:
    """The control ids the template writes around a user message and never inside the assistant turn that follows
    it (role headers such as ``<|im_start|>``, a BOS), less the stop ids: what a policy does not sample in its turn
    (``tito_audit.replay.environment``). From renders of the probe conversations, never from a model name (SmolLM2's
    BOS is its role header ``<|im_start|>``)."""
    control = control_ids(renderer.tokenizer)
    try:
        head = renderer.render_ids(_MARK_PROBES[0], add_generation_prompt=True)
        full = renderer.render_ids(_MARK_PROBES[1])
    except RenderError:
        return frozenset()
    turn = full[len(head) :] if full[: len(head)] == head else full
    return frozenset(i for i in head if i in control) - set(turn) - set(stop_ids)


# A tool episode's probe: a call whose id Mistral's template accepts (nine letters and digits), then its result.
_CALL = {"id": "call12345", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
_TOOL_PROBE: list[dict[str, Any]] = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "cold"},
]


def message_openings(renderer: Renderer, stop_ids: Sequence[int]) -> tuple[tuple[frozenset[int], tuple[int, ...]], ...]:
    """How the template writes a user message and a tool result before an assistant turn, each as (the control ids
    of that delta, less stops and those an assistant turn or its opening holds; the delta's ids from its last control
    id on: the end of the prompt a policy samples after, ``[/INST]``, ``[/TOOL_RESULTS]``,
    ``<|im_start|>assistant\n``). A sampled turn that opens with one of the first and holds the second later holds
    a message and the assistant's opening the environment wrote (``tito_audit.replay.environment``). From probe
    renders, never from a name; a probe the template refuses or rewrites gives nothing."""
    control = control_ids(renderer.tokenizer)
    out = []
    assistant: set[int] = set()
    deltas = []
    for probe in (_MARK_PROBES[0], _TOOL_PROBE):
        try:
            delta = _appended_ids(renderer, probe)
            if len(probe) > 1:
                call = renderer.render_ids(probe[:-1])
                assistant.update(call[len(renderer.render_ids(probe[:-2], add_generation_prompt=True)) :])
        except RenderError:
            continue
        if delta is not None:
            deltas.append(delta)
    try:
        head = renderer.render_ids(_MARK_PROBES[0], add_generation_prompt=True)
        assistant.update(renderer.render_ids(_MARK_PROBES[1])[len(head) :])
        # the assistant's opening (the generation prompt): a loop that renders without it has the policy write it,
        # so a turn may begin with its ids (Llama's <|start_header_id|>, harmony's <|start|>; red team 50)
        bare = renderer.render_ids(_MARK_PROBES[0])
        assistant.update(head[common_prefix_len(head, bare) :])
    except RenderError:
        return ()
    for delta in deltas:
        last = next((n for n in range(len(delta) - 1, -1, -1) if delta[n] in control), None)
        headers = frozenset(i for i in delta if i in control) - assistant - set(stop_ids)
        if last is not None and headers:
            out.append((headers, tuple(delta[last:])))
    return tuple(out)


def _appended_ids(renderer: Renderer, probe: list[dict[str, Any]]) -> list[int] | None:
    """The ids the template adds, with the generation prompt, when ``probe``'s last message is appended to the
    rest rendered without one; None where the rest is not a prefix (the template rewrites it). A render's failure
    is raised (``RenderError``)."""
    before = renderer.render_ids(probe[:-1]) if len(probe) > 1 else []
    after = renderer.render_ids(probe, add_generation_prompt=True)
    return after[len(before) :] if after[: len(before)] == before else None


MARK_WINDOW = 8  # a log's sequence opens with the template's first control token within this many ids


def template_marks(renderer: Renderer) -> frozenset[int]:
    """The special ids the template opens a conversation with (its BOS or first role marker), from renders of
    probe conversations: a log written with this tokenizer and template has one among its first ``MARK_WINDOW``
    ids; one written with another tokenizer, whose ids mean other tokens, has none there. Only the opening is
    looked at: a special id of this vocabulary can be an ordinary token of another, anywhere in a sequence."""
    specials = control_ids(renderer.tokenizer)
    found: set[int] = set()
    for probe in _MARK_PROBES:
        try:
            ids = renderer.render_ids(probe, add_generation_prompt=probe[-1]["role"] == "user")
        except RenderError:
            continue
        found.update(next(([i] for i in ids[:MARK_WINDOW] if i in specials), []))
    return frozenset(found)


def other_tokenizer(ctx: ReplayContext) -> str:
    """Why an episode is refused: it reads as another tokenizer's (replayed, its ids would be another text)."""
    return (
        f"not checked: the episode does not read as {ctx.model or 'the model'}'s tokenizer: its ids open with none "
        f"of the template's control tokens and none of its sampled turns ends with a stop token (written with "
        "another model's tokenizer?)"
    )
