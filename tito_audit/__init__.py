"""tito-audit: does a model's chat template let RL rollouts keep the Token-In, Token-Out invariant?

Public API, for RL frameworks and scripts (each name is imported on first use, so that ``import tito_audit`` and
``tito-audit --help`` do not pay for transformers)::

    from tito_audit import load, audit_model, audit_models, Trajectory
    model = load("Qwen/Qwen3-0.6B")            # Hub id, local folder or bundled name
    report = audit_model(model)                 # report.verdict (a Verdict), report.checks (CheckResult, Finding)
    run = audit_models(["qwen3-0.6b", "Qwen/Qwen2.5-7B-Instruct"])   # many, in worker processes (AuditReport)
    traj = Trajectory.from_model(model, tools=tools)   # or Trajectory.from_tokenizer(any_hf_tokenizer, ...)
    check_batch(batch)                          # run-time guard: trained ids == sampled ids (tito_audit.replay)
    LogWriter("rollouts.jsonl.gz").write_episode(...)   # replay records from any loop (tito_audit.replay)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tito_audit import compat  # noqa: F401  (quiets transformers' no-torch advisory before anything imports it)
from tito_audit._version import __version__
from tito_audit.registry import lazy_exports

# public name -> the module that defines it
_EXPORTS = {
    "AuditReport": "tito_audit.report.model_report",
    "ModelReport": "tito_audit.report.model_report",
    "audit_model": "tito_audit.audit.runner",
    "audit_models": "tito_audit.audit.parallel",
    "AuditOptions": "tito_audit.audit.context",
    "CheckResult": "tito_audit.report.check_result",
    "Finding": "tito_audit.report.findings",
    "TokenSide": "tito_audit.report.findings",
    "Verdict": "tito_audit.report.verdict",
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
    "GuardResult": "tito_audit.trainer.guard",
    "TitoGuardError": "tito_audit.trainer.guard",
    "check_batch": "tito_audit.trainer.guard",
    "LogWriter": "tito_audit.trainer.writer",
    "LoadedModel": "tito_audit.sources",
    "Provenance": "tito_audit.sources",
    "load": "tito_audit.sources.load",
}

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditOptions
    from tito_audit.audit.parallel import audit_models
    from tito_audit.audit.runner import audit_model
    from tito_audit.errors import AuditError
    from tito_audit.rendering import Renderer, RenderError, RenderLimits
    from tito_audit.report.check_result import CheckResult
    from tito_audit.report.findings import Finding, TokenSide
    from tito_audit.report.model_report import AuditReport, ModelReport
    from tito_audit.report.verdict import Verdict
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
    from tito_audit.trainer.guard import GuardResult, TitoGuardError, check_batch
    from tito_audit.trainer.writer import LogWriter


_exported = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "audit":  # the package tito_audit.audit, callable for a deprecation period (tito_audit.audit_models)
        return importlib.import_module("tito_audit.audit")
    return _exported(name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
    "audit_models",
    "check_batch",
    "compute_bridge",
    "load",
    "stop_token_ids",
]
