"""From a ``--renderer``/``--train-renderer`` name to the engine that renders for one model.

Names: ``jinja`` (the model's chat template, the default), ``renderers`` or ``renderers@FAMILY``,
``mistral-common`` or ``mistral-common@FILE``, ``openai-harmony`` (``harmony``), and ``module:function`` or
``file.py:function`` for a Python encoder.
"""

from __future__ import annotations

from tito_audit.engines import harmony, jinja, mistral, prime_renderers, python_encoder
from tito_audit.engines.base import Engine, RendererUnavailable
from tito_audit.rendering.guard import RenderLimits
from tito_audit.sources.load import LoadedModel

LIBRARIES = (prime_renderers.NAME, mistral.NAME, *harmony.ALIASES)
USAGE = "jinja | renderers[@FAMILY] | mistral-common[@FILE] | openai-harmony | module:function | file.py:function"


def check_name(spec: str) -> str | None:
    """Why ``spec`` names no renderer (None: it does), checked before any model is loaded."""
    library, _, _ = spec.partition("@")
    if spec in jinja.NAMES or library in LIBRARIES or python_encoder.is_encoder_spec(spec):
        return None
    return f"unknown renderer {spec!r} (one of: {USAGE})"


def engine_for(spec: str | None, model: LoadedModel, limits: RenderLimits | None = None) -> Engine:
    """The engine ``spec`` names, built for ``model``; ``RendererUnavailable`` (the model's report) when it cannot
    render for it."""
    if spec is None or spec in jinja.NAMES:
        return jinja.JinjaTemplate(model.tokenizer, model.chat_template, limits)
    library, at, choice = spec.partition("@")
    if at and not choice:
        raise RendererUnavailable(model.name, f"renderer {spec}: nothing after @")
    if library == prime_renderers.NAME:
        return prime_renderers.PrimeRenderers(model.name, model.tokenizer, model.provenance.repo_id, choice or None)
    if library == mistral.NAME:
        return mistral.MistralCommon(model.name, model.tokenizer, choice or None)
    if library in harmony.ALIASES:
        if choice:
            raise RendererUnavailable(model.name, f"renderer {spec}: openai-harmony takes no @ choice")
        return harmony.Harmony(model.name, model.tokenizer)
    if python_encoder.is_encoder_spec(spec):
        return python_encoder.PythonEncoder(model.name, spec)
    raise RendererUnavailable(model.name, f"unknown renderer {spec!r} (one of: {USAGE})")
