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
import enum
import types
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from tito_audit.engines.rendered import Rendered
from tito_audit.errors import RendererRefused, RendererUnavailable, refused

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.rendering.renderer import Renderer

__all__ = ["Engine", "EngineInfo", "Message", "Rendered", "RendererRefused", "RendererUnavailable", "refused"]

Message = dict[str, Any]
Native = Literal["text", "ids", "text and ids"]


@dataclass(frozen=True)
class EngineInfo:
    """What the report says about a renderer: which library, how it renders, what it could not do offline."""

    name: str  # as given on the command line
    library: str  # distribution name and version, or "transformers chat template (sandboxed)"
    native: Native | None  # None: decided by what it returns (a Python encoder), reported as it rendered
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

    def identity(self) -> str:
        """What rendered, in one line (the report's provenance where no template renders): the name, the library
        and its version, and the family, tokenizer file or encoding it was built with."""
        chosen = ", ".join(
            f"{k.replace('_', ' ')} {v[:12] if k.endswith('sha256') else v}"
            for k, v in self.detail.items()
            if isinstance(v, str)
        )
        return f"{self.name} ({self.library}{', ' + chosen if chosen else ''})"


def candidate_values(annotation: Any, default: Any = None) -> tuple[Any, ...] | None:
    """The values an option can take, from its type (``bool``, ``Literal[...]``, an ``Enum``, an optional of one of
    those) or a boolean default; None where the type does not enumerate them (a ``str``, no annotation)."""
    if annotation is bool or (isinstance(default, bool) and annotation in (None, Any)):
        return (True, False)
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        values: list[Any] = []
        for arg in typing.get_args(annotation):
            if arg is type(None):
                continue
            more = candidate_values(arg)
            if more is None:
                return None
            values += [v for v in more if v not in values]
        return tuple(values) or None
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return tuple(member.value for member in annotation)
    return None


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

    @property
    def options_enumerable(self) -> bool:
        """Whether ``option_names`` is every option the renderer takes (False: a Python encoder taking ``**kwargs``,
        whose switches the audit cannot all find, which the verdict then names as not probed)."""
        return True

    def option_values(self, name: str) -> tuple[Any, ...] | None:
        """The values option ``name`` takes, from the library's own declaration of it (a typed config field, an
        enum, a signature's annotation or default); None where they are not declared."""
        return None

    def code_values(self, name: str) -> tuple[Any, ...]:
        """Values to try for an option whose values are not declared (a Python encoder's: from its code); each is
        played only where a probe render shows it changes something."""
        return ()

    def takes_option(self, name: str, value: Any) -> bool:
        """Whether the renderer reads option ``name`` (given ``value``): an option it does not take is not given to
        it (``AuditContext`` refuses one that no renderer of the audit takes, and reports one that a side was not
        given)."""
        return name in self.option_names

    def refuse_unknown(self, options: dict[str, Any]) -> None:
        """An option the library does not take is a refused render, never silently ignored."""
        unknown = sorted(set(options) - self.option_names)
        if unknown:
            raise RendererRefused(f"{self.name} takes no option {', '.join(unknown)}")

    @property
    def native(self) -> Native | None:
        """How it rendered: ``info.native``, or for a renderer that may return either, what its renders returned
        (``text``, ``ids``, ``text and ids``; None before any render)."""
        return self.info.native

    def report(self) -> dict[str, Any]:
        """``info`` for the report, with how it really rendered."""
        return {**self.info.to_dict(), "native": self.native}

    def renderer(
        self, tokenizer: Any, template_kwargs: dict[str, Any], date: dt.datetime, limits: RenderLimits
    ) -> Renderer:
        """The ``Renderer`` every check renders and encodes through."""
        from tito_audit.engines.seam import EngineRenderer  # (the seam imports jinja2: not when adapters register)

        return EngineRenderer(self, tokenizer, template_kwargs, date, limits)
