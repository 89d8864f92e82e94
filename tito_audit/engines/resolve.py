"""From a ``--renderer``/``--train-renderer`` name to the engine that renders for one model, read from the
registry (``tito_audit.registry.RENDERERS``) that each renderer adapter in this package registers itself in.

A name is an adapter's name or alias (``jinja``, ``openai-harmony``/``harmony``), or ``NAME@CHOICE`` for one that
takes a choice (``renderers@FAMILY``, ``mistral-common@FILE``: ``meta["choice"]`` names what the choice is), or a
spec matching a pattern adapter (``meta["matches"]``: ``module:function`` for a Python encoder, which is given the
whole spec). No name is the adapter marked ``meta["default"]`` (the chat template). The listing users see
(``usage()``) is the registry's, in its order. An entry's ``obj`` builds the engine: ``obj(model, choice, limits)``.
``meta["library"]``, ``["renders"]`` and ``["notes"]`` are its row in docs/renderers.md (scripts/generate_docs.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tito_audit.engines import RENDERERS
from tito_audit.engines.base import Engine, RendererUnavailable
from tito_audit.registry import Entry

if TYPE_CHECKING:
    from tito_audit.rendering.guard import RenderLimits
    from tito_audit.sources.load import LoadedModel


def usage() -> str:
    """Every name a user can give, as listings show them: ``jinja | renderers[@FAMILY] | ...``."""
    return RENDERERS.require().choices()


def _lookup(spec: str) -> tuple[Entry, str | None, bool] | None:
    """The adapter ``spec`` names, the choice it is given (the text after ``@``; a pattern adapter's is the whole
    spec) and whether an ``@`` was written; None when no adapter takes ``spec``."""
    named = RENDERERS.get(spec)
    if named is not None and "matches" not in named.meta:
        return named, None, False
    name, at, choice = spec.partition("@")
    named = RENDERERS.get(name)
    if named is not None and "matches" not in named.meta:
        return named, choice if at else None, bool(at)
    for entry in RENDERERS.ordered():
        if entry.meta.get("matches", lambda _: False)(spec):
            return entry, spec, False
    return None


def check_name(spec: str) -> str | None:
    """Why ``spec`` names no renderer (None: it does), checked before any model is loaded."""
    return None if _lookup(spec) is not None else f"unknown renderer {spec!r} (one of: {usage()})"


def engine_for(spec: str | None, model: LoadedModel, limits: RenderLimits | None = None) -> Engine:
    """The engine ``spec`` names, built for ``model``; ``RendererUnavailable`` (the model's report) when it cannot
    render for it."""
    if spec is None:
        default = next(e for e in RENDERERS.require().ordered() if e.meta.get("default"))
        return default.obj(model, None, limits)
    found = _lookup(spec)
    if found is None:
        raise RendererUnavailable(model.name, f"unknown renderer {spec!r} (one of: {usage()})")
    entry, choice, at = found
    if at and not choice:
        raise RendererUnavailable(model.name, f"renderer {spec}: nothing after @")
    if choice is not None and at and not entry.meta.get("choice"):
        raise RendererUnavailable(model.name, f"renderer {spec}: {entry.name} takes no @ choice")
    return entry.obj(model, choice, limits)
