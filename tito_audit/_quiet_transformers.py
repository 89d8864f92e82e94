"""transformers announces at import that PyTorch is missing. tito-audit needs torch only for ``tito-audit rl``
(which says so itself), so on the default install that line is noise on every command and breaks the
one-line-on-stderr promise. Only that advisory is dropped; every other transformers message stays."""

from __future__ import annotations

import logging

NO_TORCH_ADVICE = "PyTorch was not found"


class _NoTorchAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NO_TORCH_ADVICE)


def install() -> None:
    """Filter the advisory on transformers' library logger (before transformers is imported)."""
    logger = logging.getLogger("transformers")
    if not any(isinstance(f, _NoTorchAdvice) for f in logger.filters):
        logger.addFilter(_NoTorchAdvice())


install()  # on import: ``tito_audit/__init__`` imports this module before anything imports transformers
