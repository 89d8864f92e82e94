"""tito-audit: does a model's chat template let RL rollouts keep the Token-In, Token-Out invariant?

Public API, for RL frameworks and scripts::

    from tito_audit import load, audit_model, Trajectory
    model = load("Qwen/Qwen3-0.6B")            # Hub id, local folder or bundled name
    report = audit_model(model)                 # report.verdict, report.checks
    traj = Trajectory.from_model(model, tools=tools)   # or Trajectory.from_tokenizer(any_hf_tokenizer, ...)
    check_batch(batch)                          # run-time guard: trained ids == sampled ids (tito_audit.replay)
"""

__version__ = "0.1.0"

from tito_audit.audit import AuditReport, ModelReport, audit, audit_model
from tito_audit.context import AuditOptions
from tito_audit.errors import AuditError
from tito_audit.rendering import Renderer, RenderError, RenderLimits
from tito_audit.replay.guard import GuardResult, TitoGuardError, check_batch
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

__all__ = [
    "AppendCheck",
    "AppendRefused",
    "AuditError",
    "AuditOptions",
    "AuditReport",
    "Bridge",
    "BridgeError",
    "GuardResult",
    "LoadedModel",
    "ModelReport",
    "Provenance",
    "RenderError",
    "RenderLimits",
    "Renderer",
    "Segment",
    "TitoGuardError",
    "Trajectory",
    "TruncatedCompletion",
    "__version__",
    "audit",
    "audit_model",
    "check_batch",
    "compute_bridge",
    "load",
    "stop_token_ids",
]
