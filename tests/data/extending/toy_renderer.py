"""A toy renderer adapter, ``--renderer toy-chatml``: ChatML written by hand, tools ignored.

Dropped into ``tito_audit/engines/``, this module is all it takes: the registration below puts it in
``tito-audit audit --help`` and makes ``--renderer toy-chatml`` render every scenario through it
(tests/test_registry.py proves both without writing into the package).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from tito_audit.engines.base import Engine, EngineInfo, Message, Rendered
from tito_audit.registry import RENDERERS


class ToyChatML(Engine):
    def __init__(self) -> None:
        self.info = EngineInfo("toy-chatml", "ChatML by hand (a toy)", "text")

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered:
        self.refuse_unknown(options)
        text = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
        return Rendered(text=text + ("<|im_start|>assistant\n" if add_generation_prompt else ""))


RENDERERS.register(
    "toy-chatml",
    "ChatML written by hand, tools ignored (a toy)",
    lambda model, choice, limits: ToyChatML(),
    order=90,
    meta={"library": "none", "renders": "text", "notes": "a toy"},
)
