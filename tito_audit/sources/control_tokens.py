"""Control-token text a template writes, and whether a vocabulary has it as one token.

Two readings, joined: the literals shaped like the control tokens of known vocabularies (``control_literals``:
``<|im_start|>``, ``[INST]``, ``<｜Assistant｜>``... anywhere in the template's literal text, a static reading) and
the control words the template writes in a role position (``role_literals``: turn openers and closers, channel
markers, tool-call wrappers, read from probe renders by ``rollout.turn_roles``, whatever their bracket style:
``<|turn>``, ``[e~[``, ``<seed:eos>``, ``<end_of_utterance>``). A word the template writes through a special-token
variable (``eos_token``...) is the tokenizer's own token, not the template's literal.

Below both the scan's candidate picking (``scan.pick``) and tokenizer synthesis (``sources.synthesized``): the
two read the same literals, and neither may import the other's package.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Text that looks like a control token, whoever's vocabulary it belongs to.
_CONTROL = re.compile(
    r"<\|[^|<>\s]{1,60}\|>"  # <|im_start|>, <|start_header_id|>
    r"|<｜[^｜<>\n]{1,60}｜>"  # DeepSeek's full-width bars
    r"|\[/?[A-Z][A-Z_]{2,30}\]"  # [INST], [TOOL_CALLS], [/AVAILABLE_TOOLS]
    r"|<(?:start|end)_of_turn>"  # Gemma
    r"|</?s>"  # Llama-2 / Mistral bos/eos written literally
)

# Special-token variables transformers passes to a template (those the tokenizer defines).
SPECIAL_VARIABLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def control_literals(text: str) -> list[str]:
    """Distinct control-token-like strings in ``text``, in order of first appearance."""
    return list(dict.fromkeys(_CONTROL.findall(text)))


def read_special_variables(template: str) -> list[str]:
    """The special-token variables (``bos_token``...) a template reads."""
    from tito_audit.rendering.analysis import loaded_names

    try:
        names = loaded_names(template)
    except Exception:  # does not parse: the audit reports that
        return []
    return [v for v in SPECIAL_VARIABLES if v in names]


def role_literals(renderer: Any) -> list[str]:
    """The control words ``renderer``'s template writes in a role position (``rollout.turn_roles``), less those
    it writes through a special-token variable (the values of the variables it reads, on this tokenizer)."""
    from tito_audit.rollout.turn_roles import turn_roles

    try:
        words = turn_roles(renderer).words
    except Exception:  # a probe render failing in an unforeseen way: the audit meets it and classifies it
        return []
    variables = {getattr(renderer.tokenizer, v, None) for v in read_special_variables(renderer.chat_template)}
    return [w for w in words if w not in variables]


def template_literals(literal: str, roles: Iterable[str] = ()) -> list[str]:
    """The template's control literals: ``control_literals`` of its literal text, then its role literals."""
    return list(dict.fromkeys([*control_literals(literal), *roles]))


def token_in_vocab(tokenizer: Any, token: str) -> bool:
    """Whether the tokenizer encodes ``token`` as one token (``rollout.stop.single_token``)."""
    from tito_audit.rollout.stop import single_token

    return single_token(tokenizer, token) is not None


def missing_tokens(
    tokenizer: Any, literal: str, hidden: frozenset[str] = frozenset(), roles: Iterable[str] = ()
) -> list[str]:
    """Control-token literals of the template (``template_literals``) that the vocabulary does not have as single
    tokens (``hidden``: tokens a scan's synthesis added to it, which are not its own: ``sources.synthesized``)."""
    return [t for t in template_literals(literal, roles) if t in hidden or not token_in_vocab(tokenizer, t)]
