"""``tito-audit replay LOG --weights PATH``: what the log's divergences do to the user's own policy.

One concept per module: ``sampler`` (the engine's sampler settings, torch-free), ``select`` (all episodes, or a
deterministic sample), ``pairs`` (per episode the trained sequence and replay's reference buffer, with the
engine's log-probs and sampled contexts), ``logprobs`` (padded batched forwards, the model's own head at chosen
positions), ``attribution`` (numeric drift / TITO / never sampled, per trained token), ``estimators`` (the KL
estimators' exact bias under the sampler), ``gradient`` (per-episode streamed gradient comparison), ``run``
(chunks of episodes through all of it), ``report`` (the three checks and the JSON section), ``session`` (load the
weights once and run a log). Needs torch (the ``rl`` extra); docs/replay.md, section "Your weights".

    from tito_audit.replay.weights import Policy, analyze_pairs, build_pair, tito_only
    totals = analyze_pairs((build_pair(ep, tito_only(ctx)) for ep in episodes), Policy.of(model, vmap))
"""

from tito_audit.replay.weights.pairs import Pair, build_pair, tito_only, with_settings
from tito_audit.replay.weights.run import Policy, WeightsTotals, analyze_pairs
from tito_audit.replay.weights.session import WeightsOptions, load_policy, run_weights

__all__ = [
    "Pair",
    "Policy",
    "WeightsOptions",
    "WeightsTotals",
    "analyze_pairs",
    "build_pair",
    "load_policy",
    "run_weights",
    "tito_only",
    "with_settings",
]
