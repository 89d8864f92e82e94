"""The trainer's clamps on the KL estimators (verl's), and k1/k3 of one log-ratio under them: torch-free, so that
the log-prob attribution of ``replay --weights`` (plain floats) and the torch estimators (``kl_bias``, ``rl.kl``)
read the same numbers from one place."""

from __future__ import annotations

import math

LOG_RATIO_CLAMP = 20.0  # verl clamps log-ratios to +-20
K3_CLAMP = 10.0  # and k3 to [-10, 10]; unclamped k3 overflowed to ~1e29 on a peaky output layer


def k1_k3(log_r: float) -> tuple[float, float]:
    """k1 and k3 of one log-ratio, with the trainer's clamps."""
    x = max(-LOG_RATIO_CLAMP, min(LOG_RATIO_CLAMP, log_r))
    return -x, max(-K3_CLAMP, min(K3_CLAMP, math.expm1(x) - x))
