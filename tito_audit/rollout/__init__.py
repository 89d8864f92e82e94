"""The token buffer an RL rollout should keep: sampled ids are never re-encoded, new messages are appended
as token deltas ("bridges") computed from the chat template. The audit's simulator uses this same code."""

from tito_audit.rollout.bridge import AppendRefused, Bridge, BridgeError, compute_bridge
from tito_audit.rollout.buffer import LOGPROB_FILL, AppendCheck, Segment, Trajectory, TruncatedCompletion
from tito_audit.rollout.stop import stop_token_ids

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
