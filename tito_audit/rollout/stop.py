"""Which token ids an inference engine stops on for this model.

Not always the tokenizer's eos: Gemma closes turns with ``<end_of_turn>`` while its eos is ``<eos>``, gpt-oss
ends tool calls with ``<|call|>`` and final answers with ``<|return|>``, GLM closes no turn at all and stops on
the next turn's opener (``<|user|>``, ``<|observation|>``). We take the union of the template's turn ends
(``rollout.turn_roles``: where the template closes an assistant turn, outside every content and argument slot,
or the next turn's openers where it closes none), the tokenizer's eos and ``generation_config.json``'s
``eos_token_id``. A turn end counts only where it is one token of the tokenizer: an engine stops on a token,
and a tokenizer that splits the template's turn end (a template audited on a tokenizer not its own) has none to
stop on (``split_turn_ends`` names them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tito_audit.rendering.renderer import Renderer
from tito_audit.rendering.tokenizer_cache import tokenizer_cache
from tito_audit.rollout.turn_roles import NEXT_OPENER, TurnRoles, turn_roles


def single_token(tokenizer: Any, text: str) -> int | None:
    """The id of ``text`` where the tokenizer encodes it as exactly that one token, else None: an added token, or a
    vocabulary entry its encoder reaches (byte-level vocabularies hold ``</s>`` as an entry that encoding the text
    never yields)."""
    tid = tokenizer.convert_tokens_to_ids(text)
    unknown = tid == getattr(tokenizer, "unk_token_id", None) and text != getattr(tokenizer, "unk_token", None)
    if not isinstance(tid, int) or unknown:  # (OLMo-2's unk is its eos: the unk id is not always "unknown")
        return None
    cache = tokenizer_cache(tokenizer)
    return tid if text in cache.added_tokens_encoder or cache.encode(text) == [tid] else None


def template_turn_end_tokens(renderer: Renderer) -> list[str]:
    """The template's turn ends (an answer's first) that are single tokens of the renderer's tokenizer."""
    return [w for w in turn_roles(renderer).turn_ends if single_token(renderer.tokenizer, w) is not None]


def split_turn_ends(renderer: Renderer) -> list[str]:
    """The template's turn ends that the renderer's tokenizer splits into several tokens (no engine stops on them)."""
    return [w for w in turn_roles(renderer).turn_ends if single_token(renderer.tokenizer, w) is None]


def stop_convention(renderer: Renderer, generation_eos_ids: Sequence[int] = ()) -> str:
    """How an engine ends an assistant turn of this template: ``after_turn`` (on a token the template writes after
    the turn), ``next_opener`` (on the next turn's opener, which the template writes as that turn's first token;
    ``generation_config.json`` listing an opener says the same), ``mixed`` (answers one way, tool-call turns the
    other: ``TurnRoles.convention_of``), or ``""`` (the template says neither)."""
    roles: TurnRoles = turn_roles(renderer)
    if roles.convention:
        return roles.convention
    openers = {single_token(renderer.tokenizer, w) for w in roles.next_openers} - {None}
    return NEXT_OPENER if openers & set(generation_eos_ids) else ""


def stop_token_ids(
    tokenizer: Any,
    renderer: Renderer | None = None,
    generation_eos_ids: Sequence[int] = (),
) -> tuple[int, ...]:
    """Engine stop ids, primary first (template turn end, then eos, then generation_config)."""
    ids: list[int] = []
    if renderer is not None:
        for text in template_turn_end_tokens(renderer):
            tid = single_token(tokenizer, text)
            if tid is not None:
                ids.append(tid)
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    ids.extend(int(i) for i in generation_eos_ids)
    return tuple(dict.fromkeys(ids))
