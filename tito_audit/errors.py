"""Operational errors: bad input that stops one model's audit but never the whole run.

Every error carries a stable ``kind`` (used in JSON reports and scan summaries) and renders as one line
that names the model and the cause. The CLI maps any of them to exit code 2. Exit code 3 is the gate's "could
not check": a check errored, or fewer scenarios played than ``--min-coverage`` asks.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_OPERATIONAL = 2
EXIT_INCOMPLETE = 3


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
