"""The verdict of one ``tito-audit rl`` run, its exit code, what it holds for, and what to do about it.

- ``corrupted`` (exit 1): the exact token facts show trained tokens that were never sampled, sampled tokens R
  drops from the loss, or R could not rebuild an episode; or in some batch R's gradient differs from B's beyond
  the tolerance (10 x the measured noise floor). Facts outrank gradients: a batch that happens to hold only
  unaffected episodes cannot make a run with affected scenarios "identical".
- ``identical`` (exit 0): no token fact differs and every batch's gradients, compared at a fixed advantage
  (A = 1 for every sequence, so that the comparison does not depend on rewards), agree within the tolerance.
- ``not_applicable`` (exit 3): as identical, but the template shows no tool calls (no scenario has a call it can
  render), so nothing was said about tool turns.
- ``undetermined`` (exit 3): a batch compared nothing (B's gradient was zero).

Every verdict names the samples it holds for: "identical" for canonical ids says nothing about a sampler that
emits non-canonical splits, which re-encoding undoes whatever the template does.
"""

from __future__ import annotations

from typing import Any

from tito_audit.errors import EXIT_FINDINGS, EXIT_INCOMPLETE, EXIT_OK

NOISE_FACTOR = 10.0  # identical: within this many times the measured noise floor
EXIT_CODES = {
    "corrupted": EXIT_FINDINGS,
    "identical": EXIT_OK,
    "not_applicable": EXIT_INCOMPLETE,
    "undetermined": EXIT_INCOMPLETE,
}
HEADLINES = {
    "corrupted": "R gradient corrupted (re-tokenization changes what is trained)",
    "identical": "R gradient identical to B within the noise floor",
    "not_applicable": "not applicable to tool turns (the template shows no tool calls)",
    "undetermined": "undetermined (a batch compared nothing)",
}
FACT_KEYS = ("mismatched_trained", "flip_sampled_dropped", "flip_template_trained", "naive_crashes")


def _fact_changes(facts: dict[str, Any] | None) -> int:
    return sum(int(facts.get(k, 0)) for k in FACT_KEYS) if facts else 0


def holds_for(setup: dict[str, Any], config: dict[str, Any]) -> str:
    """Which samples the verdict describes."""
    if config.get("control"):
        return "the control (R := B), whatever the samples"
    sampling = setup.get("sampling")
    if isinstance(sampling, dict):
        canonical = setup.get("canonical_turn_fraction")
        share = f"; {canonical:.0%} of their turns canonical" if canonical is not None else ""
        return f"the policy's own samples under {sampling.get('description', 'its sampler')}{share}"
    rate = float(config.get("noncanonical_rate") or 0.0)
    if rate > 0:
        return f"samples with {rate:.0%} of sampled tokens split non-canonically (--noncanonical-rate {rate:g})"
    return (
        "canonical samples only (the template's own tokenization); a sampler that emits non-canonical splits is not "
        "covered: rerun with --noncanonical-rate 0.05"
    )


def decide(steps: list[dict[str, Any]], setup: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    noise = max((s["noise_floor"] for s in steps), default=0.0)
    tolerance = NOISE_FACTOR * noise
    template_facts, sampled_facts = setup.get("token_facts"), setup.get("sampled_token_facts")
    reasons: list[str] = []
    for label, facts in (("every scenario, canonical ids", template_facts), ("the sampled episodes", sampled_facts)):
        if _fact_changes(facts):
            assert facts is not None
            reasons.append(
                f"token facts ({label}): {facts['mismatched_trained']} trained tokens without partner, "
                f"{facts['flip_sampled_dropped']} sampled tokens dropped, {facts['flip_template_trained']} template "
                f"tokens trained, {facts.get('naive_crashes', 0)} episodes R could not rebuild"
            )
    errors = [(s["step"], s["gradient"]["rel_error"]) for s in steps]
    beyond = [(k, e) for k, e in errors if e is not None and e > tolerance]
    if beyond:
        k, e = max(beyond, key=lambda ke: ke[1])
        reasons.append(f"gradient: rel. error {e:.3g} in batch {k} (tolerance {tolerance:.1g})")
    empty = [k for k, e in errors if e is None]
    if reasons:
        verdict = "corrupted"
    elif empty or not steps:
        verdict = "undetermined"
        reasons.append(f"batch(es) {', '.join(map(str, empty))}: B's gradient is zero, nothing was compared")
    elif setup.get("template_parse_rate") is None:
        verdict = "not_applicable"
        reasons.append("no scenario has a tool call the template can render (R's parse rate is n/a)")
    else:
        verdict = "identical"
    out = {
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "headline": HEADLINES[verdict],
        "reasons": reasons,
        "holds_for": holds_for(setup, config),
        "tolerance": tolerance,
    }
    out["what_to_do"] = what_to_do(verdict, steps, setup, config)
    return out


def what_to_do(verdict: str, steps: list[dict[str, Any]], setup: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """The actions a practitioner can take, most direct first."""
    model = config.get("model", "MODEL")
    template_changes = _fact_changes(setup.get("token_facts")) > 0
    out: list[str] = []
    if verdict == "corrupted":
        out.append(
            "keep a token buffer: train on the sampled ids plus the environment's token deltas "
            "(tito_audit.rollout.Trajectory), and gate every batch with tito_audit.replay.check_batch "
            "(or a rollout log with `tito-audit replay`)"
        )
        noncanonical = bool(config.get("noncanonical_rate")) or (setup.get("canonical_turn_fraction") or 1.0) < 1.0
        if template_changes and not config.get("noncanonical_rate"):
            out.append(
                "or see whether a template patch proves out (re-rendering that keeps history): "
                f"`tito-audit fix {model}`"
            )
        if noncanonical or not template_changes:
            out.append(
                "a template patch cannot help non-canonical samples: re-encoding undoes the sampler's non-canonical "
                "splits, only a token buffer keeps them"
            )
    elif verdict == "identical":
        out.append(
            "re-rendering reproduces the buffer for these samples; keep a token buffer anyway if your sampler can "
            "emit non-canonical splits (check with --noncanonical-rate 0.05, or replay a real log)"
        )
    elif verdict == "not_applicable":
        out.append(
            f"the template renders no tool calls, so tool turns cannot be trained through it: patch it "
            f"(`tito-audit fix {model}`) or train tool use with a template that renders calls"
        )
    else:
        out.append("rerun with more --steps or other --scenario prefixes so that every batch trains tokens")
    sampling = setup.get("sampling")
    if isinstance(sampling, dict) and not sampling.get("pure", True):
        bias: dict[str, Any] = next((s["kl"].get("bias", {}) for s in reversed(steps) if "kl" in s), {})
        detail = (
            f" (k3 averages to {bias['expected_k3']:.3g} against an exact KL of {bias['kl']:.3g}; the sampler never "
            f"draws {bias['truncated_mass']:.1%} of the policy's mass)"
            if "expected_k3" in bias
            else ""
        )
        out.append(
            "change the sampler: with top_k/top_p/temperature/min length the KL estimators are biased"
            + detail
            + "; sample with top_k=0, top_p=1, temperature 1, or correct the KL term for q"
        )
    return out
