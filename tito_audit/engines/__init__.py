"""Renderers other than the model's Jinja template: what engines and trainers really render with.

``base`` is the interface (``Engine``), ``seam`` shows an engine to the checks as a ``Renderer``, and each other
module adapts one library: ``jinja`` (the model's template, the default), ``prime_renderers`` (PrimeIntellect's
``renderers``), ``mistral`` (``mistral-common``), ``harmony`` (``openai-harmony``), ``python_encoder`` (any
``module:function``). ``resolve`` turns a name into one; ``pair`` compares an engine's context with a trainer's
re-render. The libraries are optional extras: an engine whose library is missing is an error for the model.
"""

from tito_audit.engines.base import Engine, EngineInfo, Rendered, RendererRefused, RendererUnavailable

__all__ = ["Engine", "EngineInfo", "Rendered", "RendererRefused", "RendererUnavailable"]
