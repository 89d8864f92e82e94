"""tito-audit: does a model's chat template let RL rollouts keep the Token-In, Token-Out invariant?

Public API, for RL frameworks and scripts (each name is imported on first use, so that ``import tito_audit`` and
``tito-audit --help`` do not pay for transformers)::

    from tito_audit import load, audit_model, Trajectory
    model = load("Qwen/Qwen3-0.6B")            # Hub id, local folder or bundled name
    report = audit_model(model)                 # report.verdict (a Verdict), report.checks (CheckResult, Finding)
    traj = Trajectory.from_model(model, tools=tools)   # or Trajectory.from_tokenizer(any_hf_tokenizer, ...)
    check_batch(batch)                          # run-time guard: trained ids == sampled ids (tito_audit.replay)
    LogWriter("rollouts.jsonl.gz").write_episode(...)   # replay records from any loop (tito_audit.replay)
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from tito_audit import _quiet_transformers  # noqa: F401  (before anything imports transformers)
from tito_audit._version import __version__

# public name -> the module that defines it
_EXPORTS = {
    "AuditReport": "tito_audit.audit",
    "ModelReport": "tito_audit.audit",
    "audit": "tito_audit.audit",
    "audit_model": "tito_audit.audit",
    "AuditOptions": "tito_audit.context",
    "CheckResult": "tito_audit.checks.base",
    "Finding": "tito_audit.findings",
    "TokenSide": "tito_audit.findings",
    "Verdict": "tito_audit.verdict",
    "AuditError": "tito_audit.errors",
    "Renderer": "tito_audit.rendering",
    "RenderError": "tito_audit.rendering",
    "RenderLimits": "tito_audit.rendering",
    "AppendCheck": "tito_audit.rollout",
    "AppendRefused": "tito_audit.rollout",
    "Bridge": "tito_audit.rollout",
    "BridgeError": "tito_audit.rollout",
    "Segment": "tito_audit.rollout",
    "Trajectory": "tito_audit.rollout",
    "TruncatedCompletion": "tito_audit.rollout",
    "compute_bridge": "tito_audit.rollout",
    "stop_token_ids": "tito_audit.rollout",
    "GuardResult": "tito_audit.replay.guard",
    "TitoGuardError": "tito_audit.replay.guard",
    "check_batch": "tito_audit.replay.guard",
    "LogWriter": "tito_audit.replay.writer",
    "LoadedModel": "tito_audit.sources",
    "Provenance": "tito_audit.sources",
    "load": "tito_audit.sources.load",
}

if TYPE_CHECKING:
    from tito_audit.audit import AuditReport, ModelReport, audit, audit_model
    from tito_audit.checks.base import CheckResult
    from tito_audit.context import AuditOptions
    from tito_audit.errors import AuditError
    from tito_audit.findings import Finding, TokenSide
    from tito_audit.rendering import Renderer, RenderError, RenderLimits
    from tito_audit.replay.guard import GuardResult, TitoGuardError, check_batch
    from tito_audit.replay.writer import LogWriter
    from tito_audit.rollout import (
        AppendCheck,
        AppendRefused,
        Bridge,
        BridgeError,
        Segment,
        Trajectory,
        TruncatedCompletion,
        compute_bridge,
        stop_token_ids,
    )
    from tito_audit.sources import LoadedModel, Provenance
    from tito_audit.sources.load import load
    from tito_audit.verdict import Verdict


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    setattr(sys.modules[__name__], name, value)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


class _Package(types.ModuleType):
    """``tito_audit.audit`` is the function, as it was when this package imported it eagerly: importing the
    submodule of the same name must not rebind the package attribute to the module."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "AppendCheck",
    "AppendRefused",
    "AuditError",
    "AuditOptions",
    "AuditReport",
    "Bridge",
    "BridgeError",
    "CheckResult",
    "Finding",
    "GuardResult",
    "LoadedModel",
    "LogWriter",
    "ModelReport",
    "Provenance",
    "RenderError",
    "RenderLimits",
    "Renderer",
    "Segment",
    "TitoGuardError",
    "TokenSide",
    "Trajectory",
    "TruncatedCompletion",
    "Verdict",
    "__version__",
    "audit",
    "audit_model",
    "check_batch",
    "compute_bridge",
    "load",
    "stop_token_ids",
]
