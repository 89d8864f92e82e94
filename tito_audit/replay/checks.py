"""The replay's own checks: ids, titles, severities, explanations and fix hints, in report order.

They are not audit checks (the audit does not run them); the report formats, suppressions and baselines take
them as they take the audit's. ``CHECK_IDS`` is what a ``[[suppress]]`` entry may name besides the audit's.
"""

from __future__ import annotations

from dataclasses import dataclass

from tito_audit.checks.base import Severity


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
)
CHECK_IDS = tuple(c.id for c in CHECKS)
BY_ID = {c.id: c for c in CHECKS}
