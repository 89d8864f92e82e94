"""The token delta for messages appended after an assistant turn (the only template step TITO keeps).

Render the history up to the assistant turn, render it again with the new messages and the generation
prompt, and keep the tail after the assistant's stop token. Both renders are encoded with control-token text
in message content sanitized (a tool result containing ``<|im_end|>`` stays text). When the second render does
not start with the first one up to the stop token, the template is not prefix-preserving for this append:
there is no correct delta, and we refuse rather than guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.payloads import message_payloads, payload_in
from tito_audit.rollout.tokens import common_prefix_len
from tito_audit.rollout.turn_start import turn_start


@dataclass(frozen=True)
class Bridge:
    ids: list[int]
    prefix_len: int  # tokens of the history render the delta is attached after (up to the stop token)
    trailing_ids: list[int]  # what the template renders after the stop token in the history render
    stop_rendered: bool  # False when the template writes no stop token after the assistant turn
    stop_id: int | None = None  # the stop token the template closes the assistant turn with (when rendered)


class AppendRefused(Exception):
    """The buffer refused an append; ``reason`` says why. Nothing was appended."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BridgeError(AppendRefused):
    """The template rewrites the existing prefix when these messages are appended: no token delta is exact."""

    def __init__(
        self,
        reason: str,
        index: int,
        before: list[int],
        after: list[int],
        forced_ids: list[int],
        removed: list[int] | None = None,
        inserted: list[int] | None = None,
        inside_turn: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.index = index  # first divergent token of the history render
        self.before = before  # history render (up to the stop)
        self.after = after  # render with the new messages
        # What appending anyway would add: the tail after the same (k-th) stop token of the new render.
        # ``Trajectory.append_refused`` appends it, to show what naive code ends up training on.
        self.forced_ids = forced_ids
        self.removed = removed or []  # history ids the re-render drops or replaces at ``index``
        self.inserted = inserted or []  # ids the re-render puts there instead
        # The render after the stop where the turn's own content is in it (the template stops inside the turn).
        self.inside_turn = inside_turn


def assistant_stop_position(
    renderer: Renderer, history: Sequence[dict[str, Any]], tools: Any, stop_ids: Sequence[int]
) -> tuple[list[int], int | None]:
    """Ids of ``history`` (ending with an assistant turn) and the index of that turn's stop token."""
    ids, stop_at, _ = _turn_stop(renderer, history, tools, stop_ids)
    return ids, stop_at


def _turn_stop(
    renderer: Renderer, history: Sequence[dict[str, Any]], tools: Any, stop_ids: Sequence[int]
) -> tuple[list[int], int | None, str | None]:
    """``assistant_stop_position``, and what the render writes after that stop where the turn's own content (text,
    reasoning, a call) is in it (None: only template text follows the stop).

    The first stop within the turn (``rollout.turn_start``: a template that rewrites the history once this turn is
    in it parts from the prompt inside an earlier turn, whose stops are no stops of this one)."""
    ids = renderer.render_ids(history, tools=tools, add_generation_prompt=False)
    prompt = renderer.render_ids(history[:-1], tools=tools, add_generation_prompt=True) if len(history) > 1 else []
    start = common_prefix_len(prompt, ids)
    turn_chars: int | None = None  # how long the turn's text is, where it starts past the shared prefix
    if len(history) > 1:
        full_text = renderer.render(history, tools=tools)
        prompt_text = renderer.render(history[:-1], tools=tools, add_generation_prompt=True)
        at = turn_start(prompt_text, full_text, lambda: renderer.render(history[:-1], tools=tools))
        turn_chars = len(full_text) - at if at > common_prefix_len(prompt_text, full_text) else None
    stops = set(stop_ids)
    own = message_payloads(history[-1])
    for i in range(start, len(ids)):
        if ids[i] not in stops:
            continue
        rest = renderer.decode(ids[i + 1 :], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if turn_chars is not None and len(rest) >= turn_chars:
            continue  # a stop of an earlier turn the render rewrote
        return ids, i, rest if payload_in(rest, own) is not None else None
    return ids, None, None


def compute_bridge(
    renderer: Renderer,
    history: Sequence[dict[str, Any]],
    new_messages: Sequence[dict[str, Any]],
    tools: Any,
    stop_ids: Sequence[int],
    add_generation_prompt: bool = True,
) -> Bridge:
    """Delta ids for ``new_messages`` appended after ``history`` (whose last message is the assistant turn)."""
    before, stop_at, inside = _turn_stop(renderer, history, tools, stop_ids)
    cut = len(before) if stop_at is None else stop_at + 1
    prefix = before[:cut]
    after = renderer.render_ids([*history, *new_messages], tools=tools, add_generation_prompt=add_generation_prompt)
    same = common_prefix_len(prefix, after)
    if same < len(prefix):
        roles = "+".join(str(m.get("role")) for m in new_messages) or "the generation prompt alone"
        removed, inserted, what = describe_rewrite(renderer, prefix, after, same)
        raise BridgeError(
            f"appending {roles} rewrites the history at token {same} of {len(prefix)} "
            f"(history {_token(renderer, prefix, same)}, re-render {_token(renderer, after, same)}): "
            f"the template {what}; no token delta is exact for this append",
            same,
            prefix,
            after,
            _tail_after_kth_stop(prefix, after, stop_ids),
            removed,
            inserted,
        )
    if inside is not None:
        raise BridgeError(
            f"the template writes the stop token {_token(renderer, before, cut - 1)} inside the assistant turn, "
            f"before token {cut} of {len(before)} ({_short(inside)} of the same message follows it): an engine ends "
            "the turn there, and a delta after it would carry the rest of the turn as environment text",
            cut,
            prefix,
            after,
            after[cut:],
            inside_turn=inside,
        )
    return Bridge(
        ids=after[cut:],
        prefix_len=cut,
        trailing_ids=before[cut:],
        stop_rendered=stop_at is not None,
        stop_id=None if stop_at is None else before[stop_at],
    )


_WINDOW = 128  # at most this many history tokens dropped / re-render tokens inserted are looked for
_SYNC = 4  # tokens that must agree again after an edit


def _short(text: str, limit: int = 48) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _token(renderer: Renderer, ids: Sequence[int], i: int) -> str:
    if i >= len(ids):
        return "ends"
    return f"{_short(renderer.decode([ids[i]], skip_special_tokens=False))} id {ids[i]}"


def _resync(a: Sequence[int], b: Sequence[int]) -> tuple[int, int] | None:
    """Smallest ``(k, j)`` (by ``k + j``) after which history ``a[k:]`` and re-render ``b[j:]`` agree again.

    "Agree" means on the next ``_SYNC`` tokens (or the end of the history): the first edit is named even when
    the template makes more than one.
    """
    for total in range(1, 2 * _WINDOW + 1):
        for k in range(max(0, total - min(len(b), _WINDOW)), min(total, len(a), _WINDOW) + 1):
            j = total - k
            n = min(_SYNC, len(a) - k)
            if (n == 0 or (j < len(b) and a[k] == b[j])) and list(a[k : k + n]) == list(b[j : j + n]):
                return k, j
    return None


def describe_rewrite(
    renderer: Renderer, before: Sequence[int], after: Sequence[int], index: int
) -> tuple[list[int], list[int], str]:
    """What the template did at the first divergent token: removed ids, inserted ids, and that in words.

    The edit is the smallest one after which history and re-render agree again: Qwen3 dropping an old
    ``<think>`` block is a deletion, a system message moved to the front an insertion.
    """
    a, b = list(before[index:]), list(after[index:])
    at = _resync(a, b)

    def text(ids: list[int]) -> str:
        return _short(renderer.decode(ids, skip_special_tokens=False))

    if at is None:
        removed, inserted = a[:16], b[:16]
        return removed, inserted, f"rewrites the rest of the history: {text(removed)} becomes {text(inserted)}"
    removed, inserted = a[: at[0]], b[: at[1]]
    if not inserted:
        return removed, inserted, f"drops {len(removed)} history token(s) {text(removed)}"
    if not removed:
        return removed, inserted, f"inserts {len(inserted)} token(s) {text(inserted)} into the history"
    return removed, inserted, f"replaces {text(removed)} with {text(inserted)}"


def _tail_after_kth_stop(prefix: list[int], after: list[int], stop_ids: Sequence[int]) -> list[int]:
    stops = set(stop_ids)
    k = sum(1 for t in prefix if t in stops)
    seen = 0
    for i, t in enumerate(after):
        if t in stops:
            seen += 1
            if seen == k:
                return after[i + 1 :]
    return after[len(prefix) :]
