"""What one render of a renderer gives: text or token ids.

Its own module because both sides use it, the interface (``base``) that every renderer adapter imports when it is
registered (which must stay light: ``tito-audit --help`` lists the adapters) and the seam (``seam``) that shows an
engine to the checks through the sandboxed ``Renderer`` (which imports jinja2 and the rendering package).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Rendered:
    """One render: ``ids`` where the library produces token ids (they are what the engine feeds the model),
    ``text`` where it produces text (the engine encodes it with the model's tokenizer)."""

    text: str | None = None
    ids: Sequence[int] | None = None
