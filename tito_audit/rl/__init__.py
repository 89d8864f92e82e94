"""``tito-audit rl``: a short GRPO-style loop that computes the policy gradient twice from the same episodes.

View B keeps the sampled ids in a token buffer (``tito_audit.rollout.Trajectory``); view R decodes, re-renders
and re-encodes the conversation as naive rollout code does. The loop reports how far the R gradient is
from the B gradient, where the two views disagree, and probability diagnostics (KL estimators,
low-probability-token dominance, critical tokens) that are only computed for a trained policy's own samples.

``RLConfig`` imports without torch (the CLI validates a config before it loads anything); ``run_rl`` and
``RLResult`` import the loop, and torch with it, on first use.
"""

from __future__ import annotations

from typing import Any

from tito_audit.rl.config import RLConfig

__all__ = ["RLConfig", "RLResult", "run_rl"]


def __getattr__(name: str) -> Any:
    if name == "run_rl":
        from tito_audit.rl.loop import run_rl

        return run_rl
    if name == "RLResult":
        from tito_audit.rl.result import RLResult

        return RLResult
    raise AttributeError(name)
