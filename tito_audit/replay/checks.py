"""The replay's own checks: ids, titles, severities, explanations and fix hints, in report order.

They are not audit checks (the audit does not run them); the report formats, suppressions and baselines take
them as they take the audit's. ``CHECK_IDS`` is what a ``[[suppress]]`` entry may name besides the audit's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.report.check_result import Severity


@dataclass(frozen=True)
class ReplayCheck:
    id: str
    title: str
    severity: Severity
    explanation: str
    fix_hint: str


CHECKS: tuple[ReplayCheck, ...] = (
    ReplayCheck(
        "replay_records",
        "Log records",
        "error",
        "Records of the log that could not be read as episodes (not JSON, missing fields, wrong types). They are "
        "counted and named by line; every other record is replayed.",
        "Fix the writer of the log, or point --map at your field names; the line numbers say where.",
    ),
    ReplayCheck(
        "replay_incomplete",
        "Episodes not checked",
        "error",
        "Episodes that could not be checked, each named with why: their reference could not be rebuilt (a render "
        "of their messages failed, e.g. a message over the render limits, and the log has no engine prompt_ids to "
        "check them against instead), their record holds no sampled id, or the log keeps no sampled ids at all "
        "(SkyRL: its turns are the trained mask's runs). Their sampled turns were still looked for in the trained "
        "sequence, so a divergence there is still found, but nothing else proves them right: the log is never "
        "called safe, and the replay exits 3 (incomplete).",
        "Log the engine's sampled ids and prompt_ids per turn (then no render is needed for the TITO check), or fix "
        "what the template cannot render; each episode is named with its line.",
    ),
    ReplayCheck(
        "replay_shape",
        "Shapes",
        "error",
        "A loss mask or log-prob list whose length differs from the ids it belongs to: the trainer pairs "
        "weights with the wrong tokens, or drops some.",
        "Build input_ids, loss_mask and logprobs in one place (a token buffer) so they cannot drift apart.",
    ),
    ReplayCheck(
        "replay_divergence",
        "Trained vs sampled",
        "error",
        "Per assistant turn, the first place where what the trainer trained on departs from what a correct loop "
        "holds (the sampled ids in a token buffer, the template's deltas appended): trained tokens that were never "
        "sampled, sampled tokens that were not trained, and loss-mask flips. The policy gradient is then taken on "
        "tokens the policy did not produce, or misses tokens it did.",
        "Keep a token buffer: append the engine's sampled ids as they are and environment messages as token "
        "deltas (tito_audit.Trajectory); call tito_audit.replay.check_batch on every batch.",
    ),
    ReplayCheck(
        "replay_context_drift",
        "Context drift",
        "warning",
        "Where the contexts the loop gave the engine (its prompt_ids) differ from what the template renders for the "
        "same messages (with the record's template kwargs and date): the model trained under contexts it will not "
        "see when deployed. The samples were still trained exactly where they were sampled (on policy); this is "
        "never a divergence. Class `date` where only the rendered date differs.",
        "Build environment deltas the template's way (render the conversation so far, then with the new messages, "
        "and take the tail), or accept the drift knowingly; log `date` when the template prints the date.",
    ),
    ReplayCheck(
        "replay_naive_what_if",
        "What naive re-tokenization would do",
        "warning",
        "These real samples decoded, parsed, re-rendered with the chat template and re-encoded, as naive rollout "
        "code does, compared with the token buffer: where such a loop would train on other tokens.",
        "Never rebuild a trajectory from text: keep the sampled ids (TITO).",
    ),
    ReplayCheck(
        "replay_noncanonical",
        "Non-canonical samples",
        "warning",
        "The share of sampled turns whose ids are not the tokenizer's own encoding of their text (a sampler may "
        "emit ' umb' + 'rella' for ' umbrella'). Any loop that re-encodes text trains on other ids for them; no "
        "template fix can prevent it.",
        "Keep the sampled ids; the rate is what re-tokenization would cost on this model's own samples.",
    ),
    # With --weights (tito_audit.replay.weights): what the loop's divergences do to the user's own policy.
    ReplayCheck(
        "replay_numeric_drift",
        "Log-prob mismatch: numeric drift vs TITO",
        "warning",
        "The trainer's log-probs (recomputed under --weights) against the engine's logged ones, per trained token: "
        "numeric drift where the trained token is the sampled token in the context it was sampled in (kernels, "
        "dtype, batch shape, processed log-probs), TITO where the token or its context differs, and tokens trained "
        "but never sampled. Warns when numeric drift is most of the mismatch and its mean |delta log p| is at or "
        "above --numeric-drift-threshold: the mismatch a framework's monitor shows is then not a token bug.",
        "Numeric drift: correct it (truncated importance sampling on the engine/trainer ratio) or align the "
        "engine's and the trainer's precision and kernels. TITO: keep a token buffer (replay_divergence says where).",
    ),
    ReplayCheck(
        "replay_logprob_alignment",
        "Log-prob alignment",
        "error",
        "Which positions the logged log-probs belong to, tested against the policy's own (--weights) at every "
        "sampled token trained in the very context it was sampled in: the logged alignment against each hypothesis "
        "of a logger's mistake (the array shifted by one or two positions either way, reversed within a turn) and "
        "against the sampler's processed distribution. When a mistake explains the mismatch far better than the "
        "logged alignment (its mean |delta log p| at most a tenth, and lower by the numeric-drift threshold), the "
        "trainer pairs each token with another token's log-prob: its importance ratios and KL terms are wrong. "
        "The evidence is each hypothesis's mean |delta log p|.",
        "Fix the logger so that logprobs[k] is the engine's log-prob of ids[k] (the sampled token at k), then log "
        "again; the mean |delta log p| of the right alignment is the numeric drift that remains.",
    ),
    ReplayCheck(
        "replay_gradient",
        "Gradient effect on your weights",
        "warning",
        "Per episode, the policy gradient (--weights, fixed advantage A = 1) on what the trainer trained on against "
        "the one on the reference buffer a correct loop holds: cosine, relative error, and where in the model the "
        "difference lies. Episodes whose buffer cannot be built (no prompt_ids and no messages, a render that "
        "fails) are named, never passed.",
        "Keep a token buffer: the gradient then is the buffer's by construction.",
    ),
    ReplayCheck(
        "replay_kl_estimators",
        "KL estimators under your sampler",
        "warning",
        "At every sampled position replayed, what the k1, k2 and k3 KL estimators average to under the sampler's "
        "settings (--sampling, or the log's `sampling`) against the exact KL(policy || --ref), and the policy's "
        "mass the sampler never draws. Under a sampler that is not pure every estimator is biased.",
        "Use the estimator named; better, sample purely (temperature 1, no top-k/top-p, no minimum length) or "
        "compute the KL from the full distributions.",
    ),
)
CHECK_IDS = tuple(c.id for c in CHECKS)
BY_ID = {c.id: c for c in CHECKS}
