"""The replay's report: its check results built from the streamed totals (``aggregate.ReplayTotals``), one
function per check, and the ``AuditReport`` the formats render.

Each check's status comes from its kept findings (plus one finding per class for those counted past the first
``MAX_FINDINGS``), its summary from the counts over every episode. The report is an ``AuditReport`` with one
``ReplayModelReport``, whose verdict is the loop's rule (``tito_audit.report.loop_verdict``): every format,
suppression and baseline of the audit applies unchanged.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tito_audit.replay.aggregate import MAX_FINDINGS, ReplayTotals, kept_class
from tito_audit.replay.checks import BY_ID
from tito_audit.replay.divergence import Divergence
from tito_audit.replay.environment import StopEndings, stops_cut
from tito_audit.report.check_result import CheckResult, Status
from tito_audit.report.findings import Finding, TokenSide
from tito_audit.report.model_report import AuditReport
from tito_audit.report.replay_report import ReplayModelReport

_TAIL = "; the log's end could not be checked (a gzip trailer cut short)"


def _finding(check: str, label: str, item: Divergence | str, texts: Any) -> Finding:
    if isinstance(item, str):
        # an episode not checked names itself in the message too: formats without a location column show it
        message = f"{label}: {item}" if check == "replay_incomplete" else item
        return Finding(check, label, kept_class(check, item), message)
    also = f" (this turn also: {', '.join(item.folded)})" if item.folded else ""
    return Finding(
        check=check,
        scenario=label,
        cls=item.cls,
        message=item.message + also,
        index=item.index,
        context_start=item.context_start,
        expected=TokenSide(item.expected, texts(item.expected)) if texts else None,
        actual=TokenSide(item.actual, texts(item.actual)) if texts else None,
        affected_trainable=item.tokens,
    )


def _not_kept(t: ReplayTotals, check: str) -> list[Finding]:
    """One finding per class for the findings counted past the first ``MAX_FINDINGS``: the check's status, the gate,
    suppressions and baselines see them. The scenario names no episode, so a suppression of some episodes (a
    scenario pattern) never covers them; its count is in it, so a baseline with another count does not either."""
    first = t.first_omitted.get(check)
    return [
        Finding(
            check,
            f"{n} more past the first {MAX_FINDINGS}",
            cls,
            f"{n} more {cls} finding(s) past the first {MAX_FINDINGS} kept (counted, strips not kept); the first "
            f"finding not kept is at {first.label() if first else '?'}",
        )
        for cls, n in sorted(t.omitted.get(check, Counter()).items())
    ]


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else f"{a}/0"


def _classes(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def _result(
    t: ReplayTotals,
    texts: Any,
    cid: str,
    summary: str,
    data: dict[str, Any],
    comparisons: int,
    applicable: str | None = None,
) -> CheckResult:
    """One check's result: ``applicable`` (why it is not) makes it ``not_applicable`` with that summary; else it
    fails (an error-severity check) or warns on any kept or counted finding, and passes on none."""
    spec = BY_ID[cid]
    findings = [_finding(cid, k.label(), k.item, texts) for k in t.kept.get(cid, [])]
    findings += _not_kept(t, cid)
    status: Status
    if applicable is not None:
        status = "not_applicable"
        summary = applicable
    elif not findings:
        status = "pass"
    else:
        status = "fail" if spec.severity == "error" else "warn"
    return CheckResult(cid, spec.title, status, spec.severity, summary, spec.explanation, spec.fix_hint,
                       findings, data, comparisons)  # fmt: skip


def _records(t: ReplayTotals, texts: Any) -> CheckResult:
    return _result(
        t,
        texts,
        "replay_records",
        f"{t.malformed} of {t.records} record(s) malformed{_TAIL * bool(t.unchecked_tails)}",
        {"malformed": t.malformed, "out_of_vocabulary": t.out_of_vocabulary} | t.tail_data,
        t.records,
    )


def _incomplete(t: ReplayTotals, texts: Any) -> CheckResult:
    if t.reference_errors:
        summary = f"{t.reference_errors} of {t.episodes} episode(s) not checked (each named with why)"
    else:
        summary = f"every one of {t.episodes} episode(s) checked against a reference" + (
            f"; {t.no_trainer_episodes} with no trained sequence logged: their trainer side was not checked"
            if t.no_trainer_episodes
            else ""
        )
    data = {"not_checked": t.reference_errors, "of": t.episodes}
    return _result(t, texts, "replay_incomplete", summary, data, t.episodes, _no_episode(t))


def _shape(t: ReplayTotals, texts: Any) -> CheckResult:
    summary = f"{t.shape_episodes} of {t.episodes} episode(s) with a length mismatch"
    return _result(t, texts, "replay_shape", summary, {}, t.episodes, _no_episode(t))


def _no_episode(t: ReplayTotals) -> str | None:
    return None if t.episodes else "no episode in the log"


def _against(t: ReplayTotals) -> str:
    """What the episodes were checked against (engine prompts, rebuilt buffers, sampled turns only), and what the
    log did not hold."""
    sampled_only = t.checked_episodes - t.reference_engine - t.reference_buffer
    kinds = (
        ("engine prompts", t.reference_engine),
        ("rebuilt buffers", t.reference_buffer),
        ("sampled turns only", sampled_only),
    )
    against = ", ".join(f"{name} {n}" for name, n in kinds if n) or "nothing"
    if t.no_trainer_episodes:
        against += (
            f"; {t.no_trainer_episodes} episode(s) without a trained sequence: the trainer side was not logged, the "
            "engine's last prompt and output stand in for it (its contexts were checked, not what was trained)"
        )
    if t.unmasked_episodes:
        against += f"; {t.unmasked_episodes} episode(s) without loss_mask: which ids were trained was not checked"
    if t.environment_stops_only:
        against += (
            f"; {t.environment_stops_only} episode(s) with neither messages rendered nor log-probs: environment "
            "tokens logged as sampled were looked for only in the ids (a stop inside a turn, a turn opening with a "
            "message)"
        )
    if stops_never_trained(t):
        against += (
            f"; the stop token looks cut from the sampled turns: {t.stop_ended_turns} turn(s) hold it, "
            f"{t.stop_untrained_turns} are followed by it untrained, {t.stop_missing_turns} by more ids with none "
            f"between, {t.stopless_episodes} episode(s) have no turn holding it ({t.stop_cut_episodes} of "
            f"{t.stop_long_episodes} of three or more turns, cut before it) (unless a length limit cut them, the "
            "policy is never trained to end a turn)"
        )
    return against


def stops_never_trained(t: ReplayTotals) -> bool:
    """``environment.stops_cut`` over the checked episodes: the log looks like a loop that cuts the stop the engine
    sampled from its turns; named beside the verdict, never ``safe``."""
    endings = StopEndings(
        t.stop_ended_turns,
        t.stop_untrained_turns,
        t.stop_missing_turns,
        t.stop_long_episodes,
        t.stop_cut_episodes,
        t.stopless_episodes,
    )
    return stops_cut(endings, t.checked_episodes)


def _nothing_checked(t: ReplayTotals) -> str:
    if not t.episodes:
        return "no episode in the log"
    return f"none of {t.episodes} episode(s) could be checked (see replay_incomplete)"


def _divergence(t: ReplayTotals, texts: Any) -> CheckResult:
    lp = (
        f"; log-prob mass on affected sampled tokens {t.logprob_mass:.3f} over {t.logprob_tokens}"
        if t.logprob_tokens
        else ""
    )
    ctx = f", {t.context_divergences} in the engine's prompts" if t.context_divergences else ""
    several = f"; {t.multi_class_turns} turn(s) counted in each of their classes" if t.multi_class_turns else ""
    summary = (
        f"diverged: {_pct(t.diverged_episodes, t.checked_episodes)} episodes, {t.diverged_turns} of {t.turns} "
        f"turns ({_classes(t.by_class)}{several}){ctx}; trained never sampled {t.trained_not_sampled}, sampled not "
        f"trained {t.sampled_not_trained}, mask flips {t.mask_flips}{lp}; against {_against(t)}"
    )
    data = {
        "trained_not_sampled": t.trained_not_sampled,
        "sampled_not_trained": t.sampled_not_trained,
        "mask_flips": t.mask_flips,
        "by_class": dict(sorted(t.by_class.items())),
        "context_divergences": t.context_divergences,
        "reference_engine": t.reference_engine,
        "reference_buffer": t.reference_buffer,
        "reference_sampled": t.checked_episodes - t.reference_engine - t.reference_buffer,
        "unmasked_episodes": t.unmasked_episodes,
        "environment_stops_only": t.environment_stops_only,
        "stops_never_trained": stops_never_trained(t),
        "no_trainer_episodes": t.no_trainer_episodes,
    }
    applicable = None if t.checked_episodes or t.diverged_episodes else _nothing_checked(t)
    return _result(t, texts, "replay_divergence", summary, data, t.checked_episodes, applicable)


def _context_drift(t: ReplayTotals, texts: Any) -> CheckResult:
    summary = (
        f"the loop's context differs from the template's rendering in {_pct(t.drift_diverged, t.drift_episodes)} "
        f"episodes, {t.drift_turns} turns ({_classes(t.drift_by_class)}), {t.drift_tokens} context ids"
    )
    data = {"episodes": t.drift_episodes, "by_class": dict(sorted(t.drift_by_class.items())), "tokens": t.drift_tokens}
    applicable = (
        None if t.drift_episodes else "needs the engine's prompt_ids and messages in the log (and not --no-drift)"
    )
    return _result(t, texts, "replay_context_drift", summary, data, t.drift_episodes, applicable)


def _whatif_not_run(t: ReplayTotals) -> str:
    """Why no what-if ran, from what the log held: it needs messages, a template that renders them, the switch on."""
    if t.whatif_failed:
        return (
            f"the template did not render the messages of {t.whatif_failed} of {t.episodes} episode(s), and no "
            "other episode ran it (see replay_incomplete and the notes)"
        )
    return "needs messages in the log (and not --no-what-if or --only-tito)"


def _naive_what_if(t: ReplayTotals, texts: Any) -> CheckResult:
    failed = f"; the template does not re-render {t.whatif_failed} episode(s)" if t.whatif_failed else ""
    summary = (
        f"naive re-tokenization would diverge in {_pct(t.whatif_diverged, t.whatif_episodes)} episodes, "
        f"{t.whatif_turns} turns ({_classes(t.whatif_by_class)}), {t.whatif_tokens} of {t.sampled_tokens} "
        f"sampled tokens changed; ran on {t.whatif_episodes} of {t.checked_episodes} episode(s){failed}"
    )
    data = {
        "by_class": dict(sorted(t.whatif_by_class.items())),
        "tokens": t.whatif_tokens,
        "episodes": t.whatif_episodes,
        "of": t.checked_episodes,
        "failed": t.whatif_failed,
    }
    applicable = None if t.whatif_episodes else _whatif_not_run(t)
    return _result(t, texts, "replay_naive_what_if", summary, data, t.whatif_episodes, applicable)


def _noncanonical(t: ReplayTotals, texts: Any) -> CheckResult:
    nc = _result(
        t,
        texts,
        "replay_noncanonical",
        f"non-canonical sampled turns: {_pct(t.noncanonical_turns, t.turns)}, {t.noncanonical_tokens} token(s)",
        {"turns": t.noncanonical_turns, "of": t.turns, "rate": round(t.noncanonical_rate, 6)},
        t.noncanonical_checked,
        None if t.turns and t.noncanonical_checked else "no sampled turn re-encoded (none in the log, or --only-tito)",
    )
    if t.noncanonical_turns:
        nc.findings = [
            Finding(
                "replay_noncanonical",
                "all episodes",
                "non_canonical",
                f"{t.noncanonical_turns} of {t.turns} sampled turns are not the tokenizer's encoding of their text",
                rate=t.noncanonical_rate,
                affected_trainable=t.noncanonical_tokens,
            )
        ]
        nc.status = "warn"
    return nc


CHECK_BUILDERS = (_records, _incomplete, _shape, _divergence, _context_drift, _naive_what_if, _noncanonical)


def build_checks(t: ReplayTotals, texts: Any) -> list[CheckResult]:
    """The replay's check results from the totals, in report order (status from the kept findings, summary from
    the counts)."""
    return [build(t, texts) for build in CHECK_BUILDERS]


def build_report(
    t: ReplayTotals, model: Any, log: str, texts: Any, seconds: float = 0.0, date: str | None = None
) -> AuditReport:
    """The report; ``date``: what renders saw for records without their own ``date``."""
    m = ReplayModelReport(model.name, "error", model.provenance)
    m.checks = build_checks(t, texts)
    m.decide()
    m.seconds = seconds
    m.options = {"log": log} if date is None else {"log": log, "date": date}
    m.scenarios = {"played": t.episodes, "not_applicable": {}, "adapted": {}}
    m.replay = t.to_dict()
    return AuditReport([m])
