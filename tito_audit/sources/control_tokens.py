"""Control-token text a template writes literally, and whether a vocabulary has it as one token.

Below both the scan's candidate picking (``scan.pick``) and tokenizer synthesis (``sources.synthesized``): the
two read the same literals, and neither may import the other's package.
"""

from __future__ import annotations

import re
from typing import Any

# Text that looks like a control token, whoever's vocabulary it belongs to.
_CONTROL = re.compile(
    r"<\|[^|<>\s]{1,60}\|>"  # <|im_start|>, <|start_header_id|>
    r"|<｜[^｜<>\n]{1,60}｜>"  # DeepSeek's full-width bars
    r"|\[/?[A-Z][A-Z_]{2,30}\]"  # [INST], [TOOL_CALLS], [/AVAILABLE_TOOLS]
    r"|<(?:start|end)_of_turn>"  # Gemma
    r"|</?s>"  # Llama-2 / Mistral bos/eos written literally
)


def control_literals(text: str) -> list[str]:
    """Distinct control-token-like strings in ``text``, in order of first appearance."""
    return list(dict.fromkeys(_CONTROL.findall(text)))


def token_in_vocab(tokenizer: Any, token: str) -> bool:
    tid = tokenizer.convert_tokens_to_ids(token)
    return isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None)


def missing_tokens(tokenizer: Any, literal: str, hidden: frozenset[str] = frozenset()) -> list[str]:
    """Control-token literals of the template that the vocabulary does not have as single tokens (``hidden``:
    tokens a scan's synthesis added to it, which are not its own: ``sources.synthesized``)."""
    return [t for t in control_literals(literal) if t in hidden or not token_in_vocab(tokenizer, t)]
