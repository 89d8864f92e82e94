"""What the trainer guard reads from a tokenizer once: the stop ids an engine ends a turn on, and how the template's
next message shows after a turn (``replay.next_message``). ``check_batch(tokenizer=...)`` asks for both on every
batch, so the reading is kept per tokenizer (and per template, for a ``LoadedModel``'s), weakly: nothing kept holds
the tokenizer, so the entry dies with it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from tito_audit.replay.context import next_message
from tito_audit.replay.next_message import NextMessage

__all__ = ["Reading", "tokenizer_reading", "tokenizer_stops"]

Reading = tuple[tuple[int, ...], NextMessage | None]
# per tokenizer, per (template, generation eos ids)
_READINGS: weakref.WeakKeyDictionary[Any, dict[tuple[str | None, tuple[int, ...] | None], Reading]] = (
    weakref.WeakKeyDictionary()
)


def tokenizer_stops(tokenizer: Any) -> tuple[int, ...]:
    """The stop ids an engine ends a turn on, from the tokenizer: its chat template's turn end (Gemma's
    ``<end_of_turn>``, Phi-3's ``<|end|>``: not their eos), its eos, and the eos ids of the generation config beside
    it (``rollout.stop.stop_token_ids``, ``sources.load.generation_eos_ids_beside``: Llama-3.1's ``<|eom_id|>``);
    the eos ids alone where the template cannot be rendered."""
    return tokenizer_reading(tokenizer)[0]


def tokenizer_reading(
    tokenizer: Any, chat_template: str | None = None, generation_eos_ids: Sequence[int] | None = None
) -> Reading:
    """``tokenizer_stops``, and how the template's next message shows after a turn (``replay.context.next_message``,
    without its ``decode``; None where the template cannot be rendered). ``chat_template``, ``generation_eos_ids``:
    a ``LoadedModel``'s (default: the tokenizer's template, and the generation config beside it). Once per tokenizer
    and template, for a tokenizer that can be weakly referenced (transformers' can): a few bounded renders."""
    key = (chat_template, None if generation_eos_ids is None else tuple(generation_eos_ids))
    try:
        return _READINGS[tokenizer][key]
    except (KeyError, TypeError):
        pass
    reading = _read(tokenizer, chat_template, generation_eos_ids)
    try:
        _READINGS.setdefault(tokenizer, {})[key] = reading
    except TypeError:  # not weak-referenceable: read again next time
        pass
    return reading


def _read(tokenizer: Any, chat_template: str | None, generation_eos_ids: Sequence[int] | None) -> Reading:
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.rollout.buffer import LIBRARY_LIMITS
    from tito_audit.rollout.stop import stop_token_ids
    from tito_audit.sources.load import generation_eos_ids_beside

    generation = generation_eos_ids_beside(tokenizer) if generation_eos_ids is None else tuple(generation_eos_ids)
    try:
        template = chat_template if chat_template is not None else tokenizer.get_chat_template()
        renderer = Renderer(tokenizer, template, limits=LIBRARY_LIMITS)
        stops = stop_token_ids(tokenizer, renderer, generation)
    except Exception:  # no template, or one that does not render: the eos ids are what is known
        eos = getattr(tokenizer, "eos_token_id", None)
        return tuple(dict.fromkeys([*([int(eos)] if eos is not None else []), *generation])), None
    try:
        return stops, next_message(renderer, stops)
    except Exception:  # the stops stand; the next message is not known (every turn followed by more ids counts)
        return stops, None
