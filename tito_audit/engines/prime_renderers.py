"""PrimeIntellect's ``renderers`` (what prime-rl trains through): one hand-written renderer per model family,
token ids out, from the model's own tokenizer.

``renderers`` picks the family from the model's Hub id (its ``MODEL_RENDERER_MAP``); ``renderers@FAMILY`` names
one. The family's typed config is always given explicitly, so the library never probes the Hub for an unknown
model. Options are its chat-template fields (``enable_thinking``...), validated by the library, their values read
from the config's field types; a family whose config takes a ``conversation_start_date`` is given the audit's date.
"""

from __future__ import annotations

import datetime as dt
import json
from importlib import metadata
from typing import TYPE_CHECKING, Any

from tito_audit.engines.base import (
    Engine,
    EngineInfo,
    Message,
    Rendered,
    RendererRefused,
    RendererUnavailable,
    candidate_values,
    refused,
)
from tito_audit.registry import RENDERERS

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.sources.load import LoadedModel

NAME = "renderers"
_DATE_FIELD = "conversation_start_date"


def _library() -> Any:
    try:
        import renderers
    except ImportError as exc:
        raise ImportError(f"the `renderers` package is not installed ({ENTRY.install_hint()})") from exc
    return renderers


def family_for(repo_id: str | None) -> str | None:
    """The family ``renderers`` itself maps a Hub id to (None: unknown to it)."""
    from renderers.base import MODEL_RENDERER_MAP

    return MODEL_RENDERER_MAP.get(repo_id or "")


class PrimeRenderers(Engine):
    def __init__(self, model_name: str, tokenizer: Any, repo_id: str | None, family: str | None) -> None:
        try:
            lib = _library()
        except ImportError as exc:
            raise RendererUnavailable(model_name, f"renderer {NAME}: {exc}") from None
        chosen = family or family_for(repo_id)
        if chosen is None:
            raise RendererUnavailable(
                model_name,
                f"renderer {NAME}: the library maps no family to {repo_id or 'this model (no Hub id)'}; "
                f"name one with --renderer {NAME}@FAMILY",
            )
        try:
            self._config = lib.config_from_name(chosen)
        except ValueError as exc:
            raise RendererUnavailable(model_name, f"renderer {NAME}@{chosen}: {exc}") from None
        self._lib = lib
        self._tokenizer = tokenizer
        self._family = chosen
        self._fields = frozenset(lib.template_field_names(self._config))
        self._made: dict[str, Any] = {}
        self._model_name = model_name
        self.offline = ""
        try:
            self._made_for({}, None)  # fails now, for the model, where the family cannot be built at all
        except RendererUnavailable:
            raise
        except Exception as exc:
            raise RendererUnavailable(model_name, f"renderer {NAME}@{chosen}: {refused(NAME, exc).message}") from None
        self.info = EngineInfo(
            f"{NAME}@{chosen}",
            f"renderers {metadata.version('renderers')}",
            "ids",
            offline=self.offline,
            detail={"family": chosen},
        )

    @property
    def option_names(self) -> frozenset[str]:
        return self._fields

    def option_values(self, name: str) -> tuple[Any, ...] | None:
        """From the family's typed config: a ``bool`` field, a ``Literal`` one (``reasoning_effort``)."""
        field = getattr(type(self._config), "model_fields", {}).get(name) if name in self._fields else None
        return None if field is None else candidate_values(field.annotation, field.default)

    def _made_for(self, options: dict[str, Any], date: dt.datetime | None) -> Any:
        kwargs = {k: v for k, v in options.items() if k in self._fields}
        if _DATE_FIELD in self._fields and date is not None:
            kwargs.setdefault(_DATE_FIELD, date.strftime("%Y-%m-%d"))
        key = json.dumps(kwargs, sort_keys=True, default=repr)
        hit = self._made.get(key)
        if hit is None:
            from tito_audit.engines.harmony import with_harmony_vocabulary

            config = self._lib.merge_chat_template_kwargs(self._config, kwargs)
            # a family that renders through openai-harmony loads its vocabulary here
            hit, note = with_harmony_vocabulary(
                self._model_name, self._tokenizer, lambda: self._lib.create_renderer(self._tokenizer, config)
            )
            self._made[key] = hit
            self.offline = self.offline or note
        return hit

    def render(
        self,
        messages: list[Message],
        tools: list[dict[str, Any]] | None,
        add_generation_prompt: bool,
        options: dict[str, Any],
        date: dt.datetime,
    ) -> Rendered:
        self.refuse_unknown(options)
        try:
            made = self._made_for(options, date)
            ids = made.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        except RendererRefused:
            raise
        except Exception as exc:
            raise refused(self.name, exc) from exc
        return Rendered(ids=list(ids))

    def stop_ids(self) -> tuple[int, ...]:
        return tuple(int(i) for i in self._made_for({}, None).get_stop_token_ids())


def for_model(model: LoadedModel, family: str | None, limits: RenderLimits | None) -> Engine:
    return PrimeRenderers(model.name, model.tokenizer, model.provenance.repo_id, family)


ENTRY = RENDERERS.register(
    NAME,
    "PrimeIntellect's renderers, what prime-rl trains through",
    for_model,
    extra="renderers",
    order=10,
    meta={
        "choice": "FAMILY",
        "library": "`renderers`",
        "renders": "ids",
        "notes": "the family from the model's Hub id through the library's own `MODEL_RENDERER_MAP`, or named "
        "(`qwen3`, `llama-3`, `deepseek-v3`, `gpt-oss`...); its typed config is always given, so the library never "
        "probes the Hub",
    },
)
