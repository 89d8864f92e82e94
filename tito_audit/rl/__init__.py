"""``tito-audit rl``: a short GRPO-style loop that computes the policy gradient twice from the same episodes.

View B keeps the sampled ids in a token buffer (``tito_audit.rollout.Trajectory``); view R decodes, re-renders
and re-encodes the conversation as naive rollout code does. The loop reports how far the R gradient is
from the B gradient, where the two views disagree, and probability diagnostics (KL estimators,
low-probability-token dominance, critical tokens) that are only computed for a trained policy's own samples.
"""

from tito_audit.rl.config import RLConfig
from tito_audit.rl.loop import run_rl
from tito_audit.rl.result import RLResult

__all__ = ["RLConfig", "RLResult", "run_rl"]
