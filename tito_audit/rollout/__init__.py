"""The token buffer an RL rollout should keep: sampled ids are never re-encoded, new messages are appended
as token deltas ("bridges") computed from the chat template. The audit's simulator uses this same code.

The buffer (and with it the renderer, jinja2) is imported when first asked for, so that the small helpers on ids
(``tokens``: what a sampled id and a log-prob may be, shared with the log reader) cost nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tito_audit.registry import lazy_exports

if TYPE_CHECKING:
    from tito_audit.rollout.bridge import AppendRefused, Bridge, BridgeError, compute_bridge
    from tito_audit.rollout.buffer import LOGPROB_FILL, AppendCheck, Segment, Trajectory, TruncatedCompletion
    from tito_audit.rollout.stop import stop_token_ids

_EXPORTS = {
    "AppendRefused": "tito_audit.rollout.bridge",
    "Bridge": "tito_audit.rollout.bridge",
    "BridgeError": "tito_audit.rollout.bridge",
    "compute_bridge": "tito_audit.rollout.bridge",
    "LOGPROB_FILL": "tito_audit.rollout.buffer",
    "AppendCheck": "tito_audit.rollout.buffer",
    "Segment": "tito_audit.rollout.buffer",
    "Trajectory": "tito_audit.rollout.buffer",
    "TruncatedCompletion": "tito_audit.rollout.buffer",
    "stop_token_ids": "tito_audit.rollout.stop",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "LOGPROB_FILL",
    "AppendCheck",
    "AppendRefused",
    "Bridge",
    "BridgeError",
    "Segment",
    "Trajectory",
    "TruncatedCompletion",
    "compute_bridge",
    "stop_token_ids",
]
