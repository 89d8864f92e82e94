"""The interface every renderer implements: messages, tools and options in, text or token ids out, with the stop
tokens an engine samples to.

Engines and trainers do not all render with the model's Jinja template: vLLM renders Mistral models with
``mistral-common`` and gpt-oss with ``openai-harmony``, prime-rl trains through PrimeIntellect's ``renderers``,
DeepSeek V3.2/V4 ship Python encoders. Each is one ``Engine`` here (one module per implementation, as
``sources/`` has one per model source); the model's Jinja template, rendered by the project's sandboxed
``Renderer``, is one more. An engine hands the audit a ``Renderer`` (``Engine.renderer``), so every check and the
simulation see it through the same seam as a template.
"""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tito_audit.errors import RendererRefused, RendererUnavailable, refused

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.rendering.renderer import Renderer

__all__ = ["Engine", "EngineInfo", "Message", "Rendered", "RendererRefused", "RendererUnavailable", "refused"]

Message = dict[str, Any]
Native = Literal["text", "ids"]


@dataclass(frozen=True)
class Rendered:
    """One render: ``ids`` where the library produces token ids (they are what the engine feeds the model),
    ``text`` where it produces text (the engine encodes it with the model's tokenizer)."""

    text: str | None = None
    ids: Sequence[int] | None = None


@dataclass(frozen=True)
class EngineInfo:
    """What the report says about a renderer: which library, how it renders, what it could not do offline."""

    name: str  # as given on the command line
    library: str  # distribution name and version, or "transformers chat template (sandboxed)"
    native: Native
    offline: str = ""  # one line: what the renderer could not do offline and what was done instead ("" nothing)
    detail: dict[str, Any] = field(default_factory=dict)  # family, tokenizer file, encoder function...

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "library": self.library,
            "native": self.native,
            "offline": self.offline or None,
            **self.detail,
        }


class Engine(ABC):
    """A renderer an engine or a trainer uses. Implementations adapt one library each."""

    info: EngineInfo

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def is_template(self) -> bool:
        """The model's own Jinja template (whose source the audit can read), not a library."""
        return False

    @abstractmethod
    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered:
        """One conversation. ``options``: the template kwargs of the audit (``--template-kwarg``, the thinking
        modes) for the library's own options; ``date``: the date the audit pins. Raises ``RendererRefused``."""

    def stop_ids(self) -> tuple[int, ...]:
        """The ids the engine stops sampling on, as the library declares them; () where it declares none (they
        are then derived from the renders, as for a template)."""
        return ()

    @property
    def option_names(self) -> frozenset[str]:
        """Options the library accepts (``render``'s ``options``); reasoning switches are probed among them."""
        return frozenset()

    def refuse_unknown(self, options: dict[str, Any]) -> None:
        """An option the library does not take is a refused render, never silently ignored."""
        unknown = sorted(set(options) - self.option_names)
        if unknown:
            raise RendererRefused(f"{self.name} takes no option {', '.join(unknown)}")

    def renderer(
        self, tokenizer: Any, template_kwargs: dict[str, Any], date: dt.datetime, limits: RenderLimits
    ) -> Renderer:
        """The ``Renderer`` every check renders and encodes through."""
        from tito_audit.engines.seam import EngineRenderer

        return EngineRenderer(self, tokenizer, template_kwargs, date, limits)
