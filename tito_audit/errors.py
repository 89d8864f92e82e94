"""Operational errors: bad input that stops one model's audit but never the whole run.

Every error carries a stable ``kind`` (used in JSON reports and scan summaries) and renders as one line
that names the model and the cause. The CLI maps any of them to exit code 2. Exit code 3 is the gate's "could
not check": a check errored, or fewer scenarios played than ``--min-coverage`` asks.
"""

from __future__ import annotations

from typing import Any, TypeVar

_E = TypeVar("_E", bound=BaseException)

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_OPERATIONAL = 2
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # SIGTERM, answered as Ctrl-C is (what finished is written): 128 + SIGTERM


class AuditError(Exception):
    """Base class: a model could not be audited."""

    kind = "error"

    def __init__(self, model: str, cause: str) -> None:
        super().__init__(f"{model}: {cause}")
        self.model = model
        self.cause = cause

    def one_line(self) -> str:
        return f"{self.model}: {self.cause}".replace("\n", " ")


class ModelNotFound(AuditError):
    kind = "not_found"


class RevisionNotFound(AuditError):
    kind = "revision_not_found"


class GatedModel(AuditError):
    kind = "gated"


class NetworkUnavailable(AuditError):
    kind = "network"


class NoChatTemplate(AuditError):
    kind = "no_chat_template"


class CorruptTokenizer(AuditError):
    kind = "corrupt_tokenizer"


class CorruptConfig(AuditError):
    kind = "corrupt_config"


class TemplateCompileError(AuditError):
    kind = "template_compile"


class TemplateAlwaysRaises(AuditError):
    kind = "template_always_raises"


class TemplateSecurityError(AuditError):
    kind = "template_security"


class LimitExceeded(AuditError):
    kind = "limit_exceeded"


class MissingTokens(AuditError):
    kind = "missing_tokens"


class UsageError(AuditError):
    kind = "usage"


class UnsupportedLibrary(AuditError):
    """The installed transformers or jinja2 lacks a piece tito-audit cannot do without (``compat``)."""

    kind = "unsupported_library"


class RendererUnavailable(AuditError):
    """A renderer named with ``--renderer``/``--train-renderer`` cannot be used for this model (library missing,
    a file it needs not available offline, a vocabulary that is not the model's): the model is not audited."""

    kind = "renderer_unavailable"


class RendererRefused(Exception):
    """The renderer's library refused one conversation (a validation error, a role it does not take). The
    ``Renderer`` seam turns it into a ``RenderError`` of kind ``raised``, as a template's ``raise_exception``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def refused(library: str, exc: BaseException) -> RendererRefused:
    """A library's exception as one line naming the library."""
    return RendererRefused(f"{library}: {type(exc).__name__}: {first_line(exc)}")


class RenderError(Exception):
    """A template refused or failed to render a conversation; ``kind`` classifies why."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "raised" | "type" | "security" | "timeout" | "too_large" | "crash" | "budget"
        self.message = message
        self.memory = False  # a too_large that exhausted the render's memory budget (a limit hit, as a timeout)


class InternalError(Exception):
    """A render failed in tito-audit's own code or in a library API it calls, not in the template: never a template
    fault and never "not applicable". Not a ``RenderError``, so no handler of template failures takes it: a check it
    reaches reports status ``error`` (exit 3, incomplete), and the verdict does not rest on that check."""

    kind = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# Render failures that say what the template is by themselves (the sandbox refused it, it ran past a limit).
TEMPLATE_RENDER_KINDS = ("security", "timeout", "too_large", "budget")


def failed_every_conversation(first: RenderError, renderer: str | None = None) -> tuple[str | None, str]:
    """(error kind, cause) of a template (or the renderer named ``renderer``) that failed every conversation it was
    given, ``first`` being the first failure: ``template_security``/``template_timeout``/``template_too_large`` where
    that failure classifies the template by itself, None where the template only raised (the caller's always-raises
    kind). The audit and the scan both report it this way."""
    kind = "template_" + first.kind if first.kind in TEMPLATE_RENDER_KINDS else None
    what = "the template" if renderer is None else f"renderer {renderer}"
    return kind, f"{what} fails for every conversation ({first.kind}): {first.message}"


def kind_of(value: Any) -> str:
    """A value in a few words for an error about it: its type, and a short str's text."""
    if isinstance(value, str):
        return f"the str {value[:40]!r}"
    return type(value).__name__


def first_line(exc: BaseException) -> str:
    """An exception as one line of at most 300 characters (its type name where it has no message)."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def detached(exc: _E) -> _E:
    """``exc`` without the tracebacks of its chain (``__cause__``, else ``__context__``), for an exception kept as
    data (a cached render error, a refused append on a simulation). A kept traceback keeps every frame the
    exception passed through alive with its locals, among them what keeps the exception: a reference cycle that
    holds a whole audit's renders and buffers until the garbage collector walks them, generation by generation."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__traceback__ = None
        link = link.__cause__ or link.__context__
    return exc
