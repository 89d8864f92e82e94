"""The checks. Each module registers one check with ``@check``; all modules here are imported on load."""

import importlib
import pkgutil

from tito_audit.checks.base import (
    FINDING_CLASSES,
    REGISTRY,
    CheckResult,
    CheckSpec,
    Finding,
    Outcome,
    TokenSide,
    check,
    run_check,
)

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
