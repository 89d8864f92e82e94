"""Which token ids an inference engine stops on for this model.

Not always the tokenizer's eos: Gemma closes turns with ``<end_of_turn>`` while its eos is ``<eos>``, gpt-oss
ends tool calls with ``<|call|>`` and final answers with ``<|return|>``. We take the union of the tokenizer's eos,
``generation_config.json``'s ``eos_token_id`` and the special token the template writes right after an assistant
turn's payload (found by rendering probe conversations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.probes import MARKER, TOOLS, TURN_END_PROBES
from tito_audit.rendering.renderer import Renderer
from tito_audit.rollout.tokens import special_token_strings


def template_turn_end_tokens(renderer: Renderer) -> list[str]:
    """Special tokens that the template writes first after an assistant payload."""
    specials = special_token_strings(renderer.tokenizer)
    found: list[str] = []
    for probe in TURN_END_PROBES:
        try:
            text = renderer.render(probe, tools=list(TOOLS))
        except RenderError:
            continue
        at = text.rfind(MARKER)
        if at < 0:
            continue
        tail = text[at + len(MARKER) :]
        hits = [(tail.find(s), s) for s in specials if s in tail]
        if hits:
            found.append(min(hits)[1])
    return list(dict.fromkeys(found))


def stop_token_ids(
    tokenizer: Any,
    renderer: Renderer | None = None,
    generation_eos_ids: Sequence[int] = (),
) -> tuple[int, ...]:
    """Engine stop ids, primary first (template turn end, then eos, then generation_config)."""
    ids: list[int] = []
    if renderer is not None:
        for text in template_turn_end_tokens(renderer):
            tid = tokenizer.convert_tokens_to_ids(text)
            if isinstance(tid, int):
                ids.append(tid)
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    ids.extend(int(i) for i in generation_eos_ids)
    return tuple(dict.fromkeys(ids))
