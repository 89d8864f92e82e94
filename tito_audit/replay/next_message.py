"""How a template's next message shows in the ids a loop puts after an assistant turn.

A turn that ends without its stop token and is followed by more ids was cut before the stop when those ids are the
template's next message (a loop that dropped the sampled stop, then appended the rendered delta), and was not when
they are an environment's text written straight after a stop string (Search-R1 stops on ``</search>`` and appends
``<information>...</information>``). ``replay.environment.stop_endings`` asks ``NextMessage.found_in`` which.

The template's next message is read from what it writes between an answer and the next user message, and between
a call and its tool result (``replay.context.next_message``, probe renders, never a model name): the control ids
there (``headers``: ``<|im_start|>``, ``<|start_header_id|>``, harmony's ``<|start|>``), the first line of its text
before the message's payload, less the stop it may write there (``USER:``, ``### Instruction:``, ``<｜User｜>``,
``<|im_start|>user``), and the words it opens and ends turns with (``rollout.turn_roles``). The stop words alone
tell nothing (they are what a cut removes), so a reading with neither headers nor other text is ``known`` False,
and then any ids count, as they do without a tokenizer (red team 59: templates whose headers are prose).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def plain_decode(tokenizer: Any) -> Callable[[Sequence[int]], str]:
    """The tokenizer's own decode, special tokens kept, for ``NextMessage.decode``: the ids after a turn are decoded
    once, not kept in a renderer's cache of decodes, and the function holds only the tokenizer."""

    def decode(ids: Sequence[int]) -> str:
        return str(tokenizer.decode(list(ids), skip_special_tokens=False))

    return decode


@dataclass(frozen=True)
class NextMessage:
    """What tells the template's next message in the ids after a turn (see the module docstring). ``decode`` is the
    tokenizer's, given where the reading is used: a reading kept per tokenizer must not hold it."""

    headers: frozenset[int] = frozenset()
    words: tuple[str, ...] = ()
    known: bool = False
    decode: Callable[[Sequence[int]], str] | None = None

    def found_in(self, ids: Sequence[int]) -> bool:
        """Whether ``ids`` hold the next message (True where nothing tells it, or where they do not decode)."""
        if not self.known or not self.headers.isdisjoint(ids):
            return True
        if not self.words:  # known by its headers alone, none of which is there
            return False
        if self.decode is None:  # words that cannot be looked for: counted
            return True
        try:
            text = self.decode(ids)
        except Exception:  # ids the tokenizer does not have (a bad log): counted, as without a reading
            return True
        return any(w in text for w in self.words)
