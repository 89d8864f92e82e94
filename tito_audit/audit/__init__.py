"""The audit of one chat template: from a loaded model to its checks and its verdict.

One concept per module: ``context`` (what every check shares: the renderer, the scenarios, their simulations,
computed once), ``simulation`` (each scenario played through the token buffer), ``checks/`` (one module per
check, each registered with ``@check``), ``runner`` (one model: every check, then the verdict rule of
``tito_audit.report.verdict``) and ``parallel`` (many models in worker processes, Ctrl-C keeping what finished).

``tito_audit.audit(...)`` was the function that audits many models before this package existed; calling the
package still does that, with a ``DeprecationWarning``: call ``tito_audit.audit_models`` instead.
"""

from __future__ import annotations

import sys
import types
import warnings
from typing import Any


class _CallablePackage(types.ModuleType):
    """Deprecation shim: ``from tito_audit import audit; audit(specs)`` keeps working for one release."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(
            "tito_audit.audit(...) is deprecated: call tito_audit.audit_models(...)", DeprecationWarning, stacklevel=2
        )
        from tito_audit.audit.parallel import audit_models

        return audit_models(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
