"""The weights' figures as replay checks (every format, --fail-on, suppressions and baselines apply) and as the
JSON section ``models[0].replay.weights``.

- ``replay_numeric_drift`` (warning): the log-prob attribution; warns when numeric drift is most (> 50 %) of the
  total |Delta log p| and its mean |Delta| per token is at or above the threshold.
- ``replay_logprob_alignment`` (error): which positions the logged log-probs belong to (``alignment``); fails when
  a logger's mistake (a shift, a reversal) explains the mismatch far better than the logged alignment, with each
  hypothesis's mean |Delta log p| as evidence; the numeric drift check then does not call the mismatch numeric.
- ``replay_gradient`` (warning): per episode, the gradient on the trained sequence against the buffer's; warns on
  any episode whose gradient differs, and on any episode not compared (named with why: never a pass).
- ``replay_kl_estimators`` (warning): the estimator bias under the sampler; warns when the sampler is not pure.

A misaligned log-prob array proves the loop wrong (``unsafe``, ``tito_audit.report.loop_verdict``); the others
never change the verdict, and gate as warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tito_audit.replay.checks import BY_ID
from tito_audit.replay.weights.alignment import BUGS, MIN_POSITIONS, PROCESSED, AlignmentTotals
from tito_audit.replay.weights.attribution import CLASSES
from tito_audit.replay.weights.run import WeightsTotals
from tito_audit.report.check_result import CheckResult, Status
from tito_audit.report.findings import Finding
from tito_audit.report.model_report import AuditReport

DEFAULT_THRESHOLD = 0.01  # mean |Delta log p| per numeric token (nats) at or above which numeric drift warns
DOMINANT = 0.5


@dataclass
class Setup:
    """How the weights were run (the JSON's first keys)."""

    weights: str
    ref: str | None
    device: str
    dtype: str
    parameters: int
    max_episodes: int
    threshold: float = DEFAULT_THRESHOLD
    log_episodes: int = 0  # episodes the replay read (the sample is drawn from them)
    log_diverged: int | None = None  # of them, those the replay found diverged (None: not known)


def _result(
    cid: str, status: Status, summary: str, findings: list[Finding], data: dict[str, Any], n: int
) -> CheckResult:
    spec = BY_ID[cid]
    return CheckResult(
        cid, spec.title, status, spec.severity, summary, spec.explanation, spec.fix_hint, findings, data, n
    )


def _g(x: float | None, spec: str = ".3g") -> str:
    return "n/a" if x is None else format(x, spec)


def _not_run(t: WeightsTotals) -> str:
    if not t.not_attributed:
        return ""
    parts = [f"{n} {why} (first: {t.not_attributed_first[why]})" for why, n in sorted(t.not_attributed.items())]
    return "; not attributed: " + "; ".join(parts)


def measured(t: WeightsTotals, setup: Setup | None) -> str:
    """ "N of M episode(s) measured" and, for a sample, how it was drawn and how many diverged episodes it holds."""
    if setup is None or not setup.log_episodes:
        return f"{t.episodes} episode(s) measured (the log's size not given)"
    of = setup.log_episodes
    text = f"{t.episodes} of {of} episode(s) measured"
    if t.episodes >= of:
        return text
    text += f" (a sample of --max-episodes {setup.max_episodes}: {of - t.episodes} episode(s) not measured"
    if setup.log_diverged is not None:
        text += f"; it holds {t.diverged} of the log's {setup.log_diverged} diverged episode(s), taken first"
    return text + ")"


def numeric_drift(t: WeightsTotals, threshold: float, setup: Setup | None = None) -> CheckResult:
    a = t.attribution
    d = a.to_dict()
    c = d["classes"]
    data = {"attribution": d, "threshold": threshold}
    if a.total_abs <= 0 and not a.classes["numeric"].units:
        why = (
            "no engine log-probs (turns[].logprobs) on the episodes run: nothing to attribute"
            if a.episodes
            else "no episode could be attributed"
        )
        return _result("replay_numeric_drift", "not_applicable", why + _not_run(t), [], data, 0)
    parts = []
    for cls in CLASSES:
        x = c[cls]
        if not x["units"]:
            parts.append(f"{cls.replace('_', ' ')} none")
            continue
        unit = "runs" if cls == "never_sampled" else "tokens"
        parts.append(
            f"{cls.replace('_', ' ')} {_g(x['share'], '.1%')} ({x['units']} {unit}, "
            f"mean |Δ| {_g(x['mean_abs_dlogp'])}, k3 per sequence {_g(x['k3_sequence'])})"
        )
    ns = c["never_sampled"]
    never = (
        f"; {ns['trained_tokens']} trained token(s) never sampled, mean log p {_g(ns['mean_logp'])}"
        if ns["trained_tokens"]
        else ""
    )
    correct = d["correct_loop"]
    ideal = f"; a correct loop's mismatch here: mean |Δ| {_g(correct['mean_abs_dlogp'])}" if correct["units"] else ""
    summary = (
        f"{measured(t, setup)}; trainer vs engine log p over {a.episodes} episode(s): "
        + ", ".join(parts) + never + ideal + _not_run(t)
    )  # fmt: skip
    missing = a.no_logprob
    divergent_missing = missing["tito"] + missing["never_sampled"]
    if any(missing.values()):
        summary += (
            f"; {sum(missing.values())} trained token(s) with no engine log-prob, compared with nothing ("
            + ", ".join(f"{cls.replace('_', ' ')} {n}" for cls, n in missing.items())
            + ")"
        )
    share = a.share("numeric") or 0.0
    mean = c["numeric"]["mean_abs_dlogp"] or 0.0
    findings: list[Finding] = []
    if divergent_missing:
        findings.append(
            Finding(
                "replay_numeric_drift",
                "all episodes",
                "template",
                f"{divergent_missing} trained token(s) at divergent positions (tito {missing['tito']}, never sampled "
                f"{missing['never_sampled']}) have no engine log-prob: the mismatch there is not measured, so the "
                "shares cannot say it is numeric",
                affected_trainable=divergent_missing,
            )
        )
    elif missing["numeric"]:
        findings.append(
            Finding(
                "replay_numeric_drift",
                "all episodes",
                "numeric",
                f"{missing['numeric']} trained token(s) in their sampled context have no engine log-prob: not compared",
                affected_trainable=missing["numeric"],
            )
        )
    bug = t.alignment.bug(threshold) if t.alignment.positions >= MIN_POSITIONS else None
    if bug is not None:  # not numeric: the logger pairs tokens with other tokens' log-probs
        summary += f"; the mismatch is misaligned log-probs, not numeric drift: {BUGS[bug]} (replay_logprob_alignment)"
    elif share > DOMINANT and mean >= threshold and t.alignment.processed_explains(threshold):
        summary += f"; {PROCESSED}"
    if share > DOMINANT and mean >= threshold and not divergent_missing and bug is None:
        findings.append(
            Finding(
                "replay_numeric_drift",
                "all episodes",
                "numeric",
                f"numeric drift is {share:.0%} of the trainer/engine log-prob mismatch (mean |Δ log p| {mean:.3g} per "
                f"token, threshold {threshold:g}): the same tokens in the same context get other log-probs from the "
                "engine and the trainer; this is not a token bug",
                rate=share,
                affected_trainable=c["numeric"]["units"],
            )
        )
    status: Status = "warn" if findings else "pass"
    return _result("replay_numeric_drift", status, summary, findings, data, a.episodes)


def _means(al: AlignmentTotals) -> str:
    """Every hypothesis's mean |Delta log p| beside the logged alignment's on the same positions."""
    parts = [
        f"{name} {_g(h.mean)} (logged {_g(h.logged_mean)}, {h.positions})"
        for name, h in al.hypotheses.items()
        if h.positions
    ]
    return "; ".join(parts) or "no hypothesis had a position to compare"


def logprob_alignment(t: WeightsTotals, threshold: float, setup: Setup | None = None) -> CheckResult:
    """Which positions the logged log-probs belong to (``alignment``): fails on a logging bug, with the evidence."""
    al = t.alignment
    per = al.episode_bugs(threshold)
    data = al.to_dict() | {
        "threshold": threshold,
        "episode_bugs": {b: {"episodes": len(e), "first": e[0], "mean_abs_dlogp": h.mean} for b, (e, h) in per.items()},
    }
    if al.positions < MIN_POSITIONS:
        why = (
            f"{al.positions} sampled position(s) with an engine log-prob in their sampled context, fewer than "
            f"{MIN_POSITIONS}: nothing tested"
        )
        return _result("replay_logprob_alignment", "not_applicable", why, [], data, al.positions)
    bug = al.bug(threshold)
    summary = (
        f"{measured(t, setup)}; mean |Δ log p| as logged {_g(al.logged_mean)} over {al.positions} position(s); "
        f"{_means(al)}"
    )
    findings: list[Finding] = []
    if bug is not None:
        h, episodes = al.evidence(bug, threshold)
        where = (
            "all episodes"
            if episodes is None
            else f"{len(episodes)} of {al.tested_episodes} episode(s) tested one by one, first {episodes[0]}"
        )
        summary = f"{BUGS[bug]} ({where}); " + summary
        findings.append(
            Finding(
                "replay_logprob_alignment",
                where,
                "logprob_alignment",
                f"{BUGS[bug]}: realigned so, the mean |Δ log p| against the policy's own log-probs is {_g(h.mean)} "
                f"instead of {_g(h.logged_mean)} as logged ({h.positions} position(s) of {where}); the trainer pairs "
                f"each token with another token's log-prob. Every hypothesis over the whole log: {_means(al)}",
                affected_trainable=h.positions,
            )
        )
    elif al.processed_explains(threshold):
        summary = f"aligned; {PROCESSED}; " + summary
    status: Status = "fail" if findings else "pass"
    return _result("replay_logprob_alignment", status, summary, findings, data, al.positions)


def gradient(t: WeightsTotals, setup: Setup | None = None) -> CheckResult:
    g = t.gradient
    d = g.to_dict()
    if not t.gradient_run:
        return _result("replay_gradient", "not_applicable", "not run (--no-gradient)", [], d, 0)
    missing = [
        Finding(
            "replay_gradient",
            g.not_compared_first[why],
            "template",
            f"{n} episode(s) not compared: {why} (first: {g.not_compared_first[why]})",
        )
        for why, n in sorted(g.not_compared.items())
    ]
    if not g.compared:
        reasons = "; ".join(f.message for f in missing) or "no episode"
        return _result("replay_gradient", "not_applicable", f"compared nothing: {reasons}", missing, d, 0)
    floor = "bitwise" if not g.tolerance else f"within {g.tolerance:.2g} (10 x the noise floor)"
    summary = (
        f"{measured(t, setup)}; gradient at A = 1, trained sequence vs rebuilt buffer: {g.identical} of "
        f"{g.compared} episode(s) identical ({floor})"
    )
    if g.differ:
        groups = sorted(d["groups"].items(), key=lambda kv: -(kv[1]["share"] or 0))[:3]
        where = ", ".join(f"{name} {_g(v['share'], '.0%')}" for name, v in groups)
        summary += (
            f", {g.differ} differ: cosine min {_g(g.cos_min, '.4f')}, relative error max {_g(g.rel_max)} "
            f"(mean {_g(d['rel_error_mean'])}); the difference lies in {where}"
        )
    if missing:
        summary += "; " + "; ".join(f.message for f in missing)
    findings = [
        Finding(
            "replay_gradient",
            e["episode"],
            e["class"] or "template",
            f"gradient differs: cosine {e['cosine']:.4f}, relative error {e['rel_error']:.3g} (most in "
            f"{e['top_group']}, {_g(e['top_group_share'], '.0%')})",
        )
        for e in g.kept
    ]
    findings += missing
    return _result("replay_gradient", "warn" if findings else "pass", summary, findings, d, g.compared)


def kl_estimators(t: WeightsTotals, setup: Setup | None = None) -> CheckResult:
    b = t.bias
    d = b.to_dict()
    unknown = f"; sampler unknown for {b.unknown} episode(s)" if b.unknown else ""
    refused = f" ({b.refused} refused: {b.refused_example})" if b.refused else ""
    if not b.positions:
        why = (
            'the sampler is unknown: give --sampling \'{"temperature": ..., "top_k": ..., "top_p": ...}\' or log a '
            "`sampling` object per record"
            if b.unknown
            else "no sampled position replayed"
        )
        return _result("replay_kl_estimators", "not_applicable", why + refused, [], d, 0)
    settings = "; ".join(f"{s} ({n} episodes)" for s, n in d["sampling"].items())
    if b.with_reference:
        values = ", ".join(f"E[{k}] {d[f'expected_{k}']:.4g} (bias {d[f'bias_{k}']:+.3g})" for k in ("k1", "k2", "k3"))
        body = f"exact KL {d['kl']:.4g}; {values}"
    else:
        body = "no --ref: the bias of each estimator is not computed"
    summary = (
        f"{measured(t, setup)}; under {settings}, at {b.positions} sampled position(s): {body}; "
        f"truncated mass {d['truncated_mass']:.3%} "
        f"(max {d['truncated_mass_max']:.2%}); use {d['recommended'] or 'none of them'}: {d['why']}{unknown}{refused}"
    )
    findings = [
        Finding(
            "replay_kl_estimators",
            b.conflict_first[key],
            "sampler",
            f"--sampling ({cli}) contradicts the log's own sampling object ({logged}) in {n} episode(s) (first: "
            f"{b.conflict_first[key]}): the log's was used there",
        )
        for key, n in sorted(b.conflicts.items())
        for cli, logged in [key]
    ]
    if b.conflicts:
        summary += f"; --sampling contradicted the log's sampler in {sum(b.conflicts.values())} episode(s)"
    if not b.pure:
        findings.append(
            Finding(
                "replay_kl_estimators",
                "all episodes",
                "sampler",
                f"the sampler ({settings}) is not pure: the KL estimators average to something else than the KL; "
                f"{d['why']}",
                rate=d["truncated_mass"],
            )
        )
    return _result("replay_kl_estimators", "warn" if findings else "pass", summary, findings, d, b.positions)


def section(t: WeightsTotals, setup: Setup) -> dict[str, Any]:
    """``models[0].replay.weights``."""
    seconds = sum(t.seconds.values())
    return {
        "weights": setup.weights,
        "ref": setup.ref,
        "device": setup.device,
        "dtype": setup.dtype,
        "parameters": setup.parameters,
        "batched": t.batched,
        "episodes": {
            "run": t.episodes,
            "of": setup.log_episodes,
            "max_episodes": setup.max_episodes,
            "sample": "all" if setup.max_episodes <= 0 or setup.log_episodes <= setup.max_episodes else "hash",
            "log_diverged": setup.log_diverged,
            "by_reference": dict(sorted(t.by_reference.items())),
            "diverged": t.diverged,
            "not_attributed": dict(sorted(t.not_attributed.items())),
        },
        "attribution": t.attribution.to_dict() | {"threshold": setup.threshold},
        "alignment": t.alignment.to_dict(),
        "gradient": t.gradient.to_dict() | {"run": t.gradient_run},
        "estimators": t.bias.to_dict(),
        "seconds": {k: round(v, 3) for k, v in t.seconds.items()},
        "episodes_per_second": t.episodes / seconds if seconds > 0 else None,
    }


def attach(report: AuditReport, t: WeightsTotals, setup: Setup) -> None:
    """Add the four checks and the JSON section to a replay report, and decide its verdict again."""
    m = report.models[0]
    drift, aligned = numeric_drift(t, setup.threshold, setup), logprob_alignment(t, setup.threshold, setup)
    m.checks.extend([drift, aligned, gradient(t, setup), kl_estimators(t, setup)])
    replay = getattr(m, "replay", None)
    if isinstance(replay, dict):
        replay["weights"] = section(t, setup)
    m.decide()
