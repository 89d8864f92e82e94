"""The model's Jinja chat template, rendered by the project's sandboxed ``Renderer`` (the default renderer).

Registered as ``jinja`` (``template``): the renderer of every audit without ``--renderer``. The rendering package
(jinja2, transformers' sandbox) is imported when a template is rendered, not when the adapters register.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from tito_audit.engines.base import Engine, EngineInfo, Message, Rendered
from tito_audit.registry import RENDERERS

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.rendering.renderer import Renderer
    from tito_audit.sources.load import LoadedModel


class JinjaTemplate(Engine):
    """``apply_chat_template``'s rendering in transformers' sandbox, under the audit's bounds."""

    def __init__(self, tokenizer: Any, chat_template: str, limits: RenderLimits | None = None) -> None:
        from tito_audit.rendering.guard import RenderLimits

        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.limits = limits or RenderLimits()
        self.info = EngineInfo("jinja", "transformers chat template (sandboxed)", "text")
        self._base: Renderer | None = None

    @property
    def is_template(self) -> bool:
        return True

    def takes_option(self, name: str, value: Any) -> bool:
        """Every template kwarg is given to the template (as ``apply_chat_template`` does); one it does not read
        changes nothing."""
        return True

    def renderer(
        self, tokenizer: Any, template_kwargs: dict[str, Any], date: dt.datetime, limits: RenderLimits
    ) -> Renderer:
        """The sandboxed ``Renderer`` itself: a template audit renders exactly as it always has."""
        from tito_audit.rendering.renderer import Renderer

        return Renderer(tokenizer, self.chat_template, template_kwargs, date, limits)

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered:
        if self._base is None:
            from tito_audit.rendering.renderer import Renderer

            self._base = Renderer(self.tokenizer, self.chat_template, limits=self.limits)
        renderer = self._base.with_kwargs(**options).with_date(date)
        return Rendered(ids=renderer.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt))


def for_model(model: LoadedModel, choice: str | None, limits: RenderLimits | None) -> Engine:
    return JinjaTemplate(model.tokenizer, model.chat_template, limits)


RENDERERS.register(
    "jinja",
    "the model's chat template, in transformers' sandbox (the default)",
    for_model,
    aliases=("template",),
    order=0,
    meta={
        "default": True,
        "library": "transformers, the sandboxed chat template",
        "renders": "text",
        "notes": "exactly the audit without `--renderer`",
    },
)
