"""The checks. Each module registers one check with ``@check``; all modules here are imported on load."""

import importlib
import pkgutil

from tito_audit.checks.base import REGISTRY, CheckResult, CheckSpec, check, run_check
from tito_audit.findings import FINDING_CLASSES, Finding, Outcome, TokenSide

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def ordered_checks() -> list[CheckSpec]:
    return sorted(REGISTRY.values(), key=lambda spec: (spec.order, spec.id))


__all__ = [
    "FINDING_CLASSES",
    "REGISTRY",
    "CheckResult",
    "CheckSpec",
    "Finding",
    "Outcome",
    "TokenSide",
    "check",
    "ordered_checks",
    "run_check",
]
