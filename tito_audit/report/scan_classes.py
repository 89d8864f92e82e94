"""The class every scanned template ends in: a verdict, or why there is none.

Exactly one class per template, by precedence: a template that cannot be read or compiled is that; a
template that reaches for internals is a security finding even if it also raises; a runaway is a limit;
one that raises for every scenario says so; one whose control tokens the vocabulary lacks cannot be judged
on it; otherwise the audit's verdict stands.
"""

from __future__ import annotations

from collections.abc import Iterable

UNREADABLE = "unreadable"
DOES_NOT_COMPILE = "does_not_compile"
SECURITY = "security"
LIMIT = "limit_exceeded"
ALWAYS_RAISES = "always_raises"
MISSING_TOKENS = "missing_tokens"
AUDIT_ERROR = "audit_error"
WORKER_CRASH = "worker_crash"  # must never happen; counted so that it cannot hide
VERDICTS = ("unsafe", "tito-required", "safe")

# Summary order: verdicts first, then the error classes by precedence.
CLASSES = (
    *VERDICTS,
    MISSING_TOKENS,
    ALWAYS_RAISES,
    DOES_NOT_COMPILE,
    LIMIT,
    SECURITY,
    UNREADABLE,
    AUDIT_ERROR,
    WORKER_CRASH,
)
ERROR_CLASSES = frozenset(CLASSES) - set(VERDICTS)

DESCRIPTIONS = {
    "unsafe": "TITO breaks even with a token buffer",
    "tito-required": "safe only if rollouts keep token ids (re-rendering breaks)",
    "safe": "re-rendering keeps the sampled ids",
    MISSING_TOKENS: "writes control tokens the vocabulary lacks",
    ALWAYS_RAISES: "raises for every scenario",
    DOES_NOT_COMPILE: "does not compile",
    LIMIT: "exceeded a time/memory/output limit",
    SECURITY: "reaches for internals (refused by the sandbox)",
    UNREADABLE: "not a readable template file",
    AUDIT_ERROR: "audit failed for another reason",
    WORKER_CRASH: "the worker process died",
}

# RenderError.kind -> class, for errors that stop a template outright.
_RENDER_KIND = {"timeout": LIMIT, "too_large": LIMIT, "budget": LIMIT, "security": SECURITY}
# AuditError.kind / ModelReport.error_kind -> class.
_ERROR_KIND = {
    "template_compile": DOES_NOT_COMPILE,
    "template_always_raises": ALWAYS_RAISES,
    "template_security": SECURITY,
    "template_timeout": LIMIT,
    "template_too_large": LIMIT,
    "template_budget": LIMIT,
    "limit_exceeded": LIMIT,
    "missing_tokens": MISSING_TOKENS,
    "security": SECURITY,
    "timeout": LIMIT,
    "too_large": LIMIT,
    "always_raises": ALWAYS_RAISES,
    "does_not_compile": DOES_NOT_COMPILE,
}


def class_of_render_kind(kind: str) -> str | None:
    """The class a render failure forces on its template (None: the failure is scenario-specific)."""
    return _RENDER_KIND.get(kind)


def class_of_error_kind(kind: str | None) -> str:
    return _ERROR_KIND.get(kind or "", AUDIT_ERROR)


def decide(
    *,
    security: bool,
    limit: bool,
    always_raises: bool,
    missing: Iterable[str],
    verdict: str | None,
    error_kind: str | None = None,
) -> str:
    """The one class of a template that compiled, by precedence."""
    if security:
        return SECURITY
    if limit:
        return LIMIT
    if always_raises:
        return ALWAYS_RAISES
    if list(missing):
        return MISSING_TOKENS
    if verdict in VERDICTS:
        return verdict
    return class_of_error_kind(error_kind)
