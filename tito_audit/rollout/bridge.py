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
from tito_audit.rollout.tokens import common_prefix_len


@dataclass(frozen=True)
class Bridge:
    ids: list[int]
    prefix_len: int  # tokens of the history render the delta is attached after (up to the stop token)
    trailing_ids: list[int]  # what the template renders after the stop token in the history render
    stop_rendered: bool  # False when the template writes no stop token after the assistant turn


class BridgeError(Exception):
    """The template rewrites the existing prefix when these messages are appended."""

    def __init__(self, reason: str, index: int, before: list[int], after: list[int], forced_ids: list[int]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.index = index  # first divergent token of the history render
        self.before = before  # history render (up to the stop)
        self.after = after  # render with the new messages
        # What appending anyway would add: the tail after the same (k-th) stop token of the new render.
        # Only the simulator uses it, to show what naive code ends up training on.
        self.forced_ids = forced_ids


def assistant_stop_position(
    renderer: Renderer, history: Sequence[dict[str, Any]], tools: Any, stop_ids: Sequence[int]
) -> tuple[list[int], int | None]:
    """Ids of ``history`` (ending with an assistant turn) and the index of that turn's stop token."""
    ids = renderer.render_ids(history, tools=tools, add_generation_prompt=False)
    prompt = renderer.render_ids(history[:-1], tools=tools, add_generation_prompt=True) if len(history) > 1 else []
    start = common_prefix_len(prompt, ids)
    stops = set(stop_ids)
    for i in range(start, len(ids)):
        if ids[i] in stops:
            return ids, i
    return ids, None


def compute_bridge(
    renderer: Renderer,
    history: Sequence[dict[str, Any]],
    new_messages: Sequence[dict[str, Any]],
    tools: Any,
    stop_ids: Sequence[int],
    add_generation_prompt: bool = True,
) -> Bridge:
    """Delta ids for ``new_messages`` appended after ``history`` (whose last message is the assistant turn)."""
    before, stop_at = assistant_stop_position(renderer, history, tools, stop_ids)
    cut = len(before) if stop_at is None else stop_at + 1
    prefix = before[:cut]
    after = renderer.render_ids([*history, *new_messages], tools=tools, add_generation_prompt=add_generation_prompt)
    same = common_prefix_len(prefix, after)
    if same < len(prefix):
        raise BridgeError(
            f"appending {'+'.join(m['role'] for m in new_messages)} rewrites token {same} of the history",
            same,
            prefix,
            after,
            _tail_after_kth_stop(prefix, after, stop_ids),
        )
    return Bridge(ids=after[cut:], prefix_len=cut, trailing_ids=before[cut:], stop_rendered=stop_at is not None)


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
