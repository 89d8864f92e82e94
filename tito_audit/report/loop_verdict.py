"""The verdict on a training loop from its rollout log (``tito-audit replay``): a rule of its own, written once here.

The audit's rule (``tito_audit.report.verdict.decide``) judges a template from checks that each decide or do not;
a check that did not decide makes the verdict ``error``. A log is judged part by part: some episodes are proven
exact while others could not be checked (a record not read, a render that failed, no trainer side or no loss mask
logged, no naive what-if). Calling such a log ``error`` would throw away what was proven; calling it ``safe``
would be a green on what was never compared. So the loop's rule differs from the audit's in two ways, and only
in them:

- a part of the log left unchecked keeps the verdict from ``safe`` (``tito-required``, with an ``error:CHECK:WHY``
  reason that names it) instead of making it ``error``; ``error`` is kept for a log of which nothing was checked;
- every reason stays beside the verdict, an ``unsafe`` one included: what was not checked must still be named
  when a divergence is proven elsewhere.

The rule, over the replay's checks (``tito_audit.replay.checks``), in order:

1. ``unsafe``: ``replay_divergence`` or ``replay_shape`` failed (an active finding: the loop trains on tokens it
   never sampled, drops sampled ones, or pairs weights with the wrong ids), or, under ``--weights``,
   ``replay_logprob_alignment`` (its logger pairs each token with another token's log-prob). A suppressed one reads
   ``tito-required:suppressed:CHECK``: a suppression accepts a divergence, it does not make the loop exact.
2. ``error``: ``replay_divergence`` compared nothing (no episode could be checked), unless 1. holds.
3. ``tito-required``: anything named: episodes not checked (``replay_incomplete``), records not read
   (``replay_records``), no trainer side, no loss mask or only sampled turns logged, or neither messages nor
   log-probs to look for environment tokens with beyond stops inside turns, or turns that end without the stop
   token (most of them, or every turn of a tenth of the episodes of three or more: ``replay_divergence``'s data), the
   naive what-if diverging (``replay_naive_what_if``) or sampled turns not canonical (``replay_noncanonical``:
   re-tokenization would change them), the what-if not run on every episode.
4. ``safe``: none of these: the loop is exact on every episode, and so would naive re-tokenization be.

The other ``--weights`` checks (``replay_numeric_drift``, ``replay_gradient``, ``replay_kl_estimators``) are
warnings that never change the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tito_audit.report.check_result import CheckResult
from tito_audit.report.verdict import Decision

LOOP_VERDICTS = {
    "unsafe": "the loop trains on tokens it never sampled, or drops sampled ones: fix the loop",
    "tito-required": "the loop is exact on these episodes; naive re-tokenization would not be: keep the token buffer",
    "safe": "the loop is exact on these episodes, and naive re-tokenization would be too",
    "error": "nothing in the log could be checked",
}

# a finding of these proves the loop wrong: it trains on other tokens, or pairs them with other tokens' log-probs
# the unsafe verdict's words when a misaligned log-prob array is all that proves it
MISALIGNED = "the loop pairs its sampled tokens with log-probs that are not theirs: fix its logger"
PROVING = ("replay_divergence", "replay_shape", "replay_logprob_alignment")
NO_LOSS_MASK = "error:replay_divergence:no_loss_mask"
ENVIRONMENT_STOPS_ONLY = "error:replay_divergence:environment_stops_only"
STOPS_NEVER_TRAINED = "error:replay_divergence:stops_never_trained"
TURNS_ONLY = "error:replay_divergence:turns_only"
MALFORMED = "error:replay_records:malformed"
UNCHECKED_TAIL = "error:replay_records:unchecked_tail"
NO_TRAINER = "error:replay_divergence:no_trainer"
INCOMPLETE = "error:replay_divergence:incomplete"
NOTHING_COMPARED = "error:replay_divergence:compared_nothing"
NAIVE_NOTHING = "error:replay_naive_what_if:compared_nothing"
NAIVE_NOT_RUN = "error:replay_naive_what_if:not_run"
NAIVE_PROVEN = ("tito-required:replay_naive_what_if", "tito-required:replay_noncanonical")
# What each ``error:`` reason left unchecked, in words (the verdict line's parenthesis).
UNCHECKED = {
    INCOMPLETE: "some episodes could not be checked: see replay_incomplete",
    MALFORMED: "some records could not be read, their episodes were not checked: see replay_records",
    UNCHECKED_TAIL: "the log ends inside a gzip trailer: its records were read whole, their checksum not checked",
    NO_TRAINER: "some episodes log no trained sequence (a vLLM dump): the trainer side was not checked, only the "
    "engine's prompts against its own samples",
    NO_LOSS_MASK: "some episodes have no loss_mask (as a vLLM dump without trainer fields): which ids were trained "
    "was not checked",
    ENVIRONMENT_STOPS_ONLY: "some episodes log neither messages to render nor log-probs: environment tokens logged as "
    "sampled were looked for only in the ids, at a stop token inside a turn and at a turn opening with a message (a "
    "tool result glued to a turn cut before its stop is not seen)",
    STOPS_NEVER_TRAINED: "the sampled turns end without the stop token (most turns, or every turn of a tenth of the "
    "episodes of three or more turns, followed by it untrained or by more ids; or no turn of any episode holds it): "
    "if the engine sampled it, the loop cuts it from the turns and the policy is never trained to end a turn; log "
    "each turn's ids through its stop to tell it from turns a length limit cut",
    TURNS_ONLY: "some episodes have neither prompt_ids nor messages: only their sampled turns were looked for, the "
    "context the engine saw was not checked",
    NAIVE_NOTHING: "no naive what-if ran",
    NAIVE_NOT_RUN: "the naive what-if did not run on every episode",
}


def _proven(by_id: Mapping[str, CheckResult]) -> list[str]:
    """``unsafe:CHECK`` for each proving check that failed, then ``tito-required:suppressed:CHECK`` for each one
    whose findings are all suppressed (as in the audit: a suppression accepts a divergence, it does not fix it)."""
    present = [by_id[i] for i in PROVING if i in by_id]
    out = [f"unsafe:{c.id}" for c in present if c.status == "fail"]
    out += [
        f"tito-required:suppressed:{c.id}"
        for c in present
        if c.status != "fail" and any(f.suppressed for f in c.findings)
    ]
    return out


def _unread(by_id: Mapping[str, CheckResult]) -> list[str]:
    """Episodes not checked and records not read: never safe."""
    out = []
    incomplete, records = by_id.get("replay_incomplete"), by_id.get("replay_records")
    if incomplete is not None and incomplete.findings:
        out.append(INCOMPLETE)
    if records is not None and records.findings:  # a gzip end cut short is named, not counted as a record
        tails = records.data.get("unchecked_tails", 0)
        out += [MALFORMED] * (len(records.findings) > tails) + [UNCHECKED_TAIL] * bool(tails)
    return out


def _unlogged(divergence: CheckResult) -> list[str]:
    """What the log did not hold for the episodes that were checked (their trainer side, mask or context)."""
    data = divergence.data
    flags = (
        (NO_TRAINER, "no_trainer_episodes"),
        (NO_LOSS_MASK, "unmasked_episodes"),
        (ENVIRONMENT_STOPS_ONLY, "environment_stops_only"),
        (STOPS_NEVER_TRAINED, "stops_never_trained"),
        (TURNS_ONLY, "reference_sampled"),
    )
    return [reason for reason, key in flags if data.get(key)]


def _naive(by_id: Mapping[str, CheckResult]) -> list[str]:
    """What naive re-tokenization would do (it diverges, or samples are not canonical), and where it did not run."""
    naive, noncanonical = by_id.get("replay_naive_what_if"), by_id.get("replay_noncanonical")
    out = []
    if naive is not None and naive.findings:
        out.append("tito-required:replay_naive_what_if")
    if noncanonical is not None and noncanonical.findings:
        out.append("tito-required:replay_noncanonical")
    if naive is None or naive.status == "not_applicable":
        out.append(NAIVE_NOTHING)
    elif naive.data.get("episodes", 0) < naive.data.get("of", 0):
        out.append(NAIVE_NOT_RUN)
    return out


def decide_loop(checks: Sequence[CheckResult]) -> Decision:
    """The loop's verdict and every reason beside it, from the replay's check results after suppressions."""
    by_id = {c.id: c for c in checks}
    reasons = _proven(by_id) + _unread(by_id)
    proven = any(r.startswith("unsafe:") for r in reasons)
    divergence = by_id.get("replay_divergence")
    if divergence is None or divergence.status == "not_applicable":  # a shape finding still proves unsafe
        return Decision("unsafe" if proven else "error", [*reasons, NOTHING_COMPARED])
    reasons += _unlogged(divergence) + _naive(by_id)
    if proven:
        return Decision("unsafe", reasons)
    if divergence.comparisons == 0:
        return Decision("error", reasons)
    return Decision("tito-required" if reasons else "safe", reasons)
