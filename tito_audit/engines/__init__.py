"""Renderers other than the model's Jinja template: what engines and trainers really render with.

``base`` is the interface (``Engine``, and ``rendered``, what one render gives), ``seam`` shows an engine to the
checks as a ``Renderer``, ``resolve`` turns a ``--renderer`` name into one, ``wall_clock`` stops Python's clock
while an engine renders. Every other module is one renderer adapter that registers itself in
``tito_audit.registry.RENDERERS`` (name, aliases, summary, the extra it needs, how ``NAME@CHOICE`` is read):
``jinja`` (the model's template, the default), ``prime_renderers`` (PrimeIntellect's ``renderers``), ``mistral``
(``mistral-common``), ``harmony`` (``openai-harmony``), ``python_encoder`` (any ``module:function``). Importing
this package imports them all, so ``RENDERERS`` here is complete; adding an adapter is adding a module. Adapters
stay light at import (``tito-audit --help`` lists them): their libraries, and the sandboxed renderer, are imported
when they render. The libraries are optional extras: an engine whose library is missing is an error for the model.
"""

import importlib
import pkgutil

from tito_audit.engines.base import Engine, EngineInfo, Rendered, RendererRefused, RendererUnavailable
from tito_audit.registry import RENDERERS

# The package's own machinery, which registers nothing (``seam`` imports jinja2: never at registration).
_MACHINERY = frozenset({"base", "rendered", "resolve", "seam", "wall_clock"})

for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _MACHINERY:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["RENDERERS", "Engine", "EngineInfo", "Rendered", "RendererRefused", "RendererUnavailable"]
