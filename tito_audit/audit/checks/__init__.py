"""The checks. Each module registers one check with ``@check``; all modules here are imported on load."""

import importlib
import pkgutil

from tito_audit.audit.checks.base import REGISTRY, CheckSpec, check, run_check
from tito_audit.report.check_result import CheckResult
from tito_audit.report.findings import FINDING_CLASSES, Finding, Outcome, TokenSide

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")


def ordered_checks() -> list[CheckSpec]:
    return sorted(REGISTRY.values(), key=lambda spec: (spec.order, spec.id))


def verdict_inputs() -> tuple[str, ...]:
    """The ids of the checks whose results ``decide`` reads: a role in the verdict (``caveat`` included: its
    findings are reasons) or error severity. The others only inform the per-check report, so a caller that keeps
    only the verdict and its reasons (the corpus scan) need not run them."""
    return tuple(s.id for s in REGISTRY.values() if s.verdict is not None or s.severity == "error")


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
    "verdict_inputs",
]
