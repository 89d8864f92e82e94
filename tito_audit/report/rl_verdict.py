"""The verdict of one ``tito-audit rl`` run, its exit code, what it holds for, and what to do about it: a rule of
its own, written once here, in the report layer.

Why not the audit's rule (``tito_audit.report.verdict.decide``): that rule reads check results (findings of checks
with a verdict role) and answers about a template in its words (``safe``, ``tito-required``, ``unsafe``,
``error``). ``rl`` has no check results: it measures what re-tokenization does to a gradient, from token facts per
scenario and a relative error per batch against a measured noise floor, and answers about the gradient
(``corrupted``, ``identical``...), with a ``--control`` run that checks the comparison itself. Mapping those onto
check roles would change every rl report and still need this tolerance rule; so the rule is its own, here:

- ``corrupted`` (exit 1): the exact token facts of any scenario, in any thinking mode, whether ``--scenario`` plays it
  or not, show a trained token R changes: trained tokens without a partner, sampled tokens R drops from the loss,
  template tokens R trains, an episode R cannot rebuild, or a trained token that R keeps but after other ids (its
  context differs, so its log-prob, hence the gradient, differs for any model that reads its context); or in some
  batch R's gradient differs from B's beyond the tolerance (10 x the measured noise floor). Facts outrank
  gradients: they are per scenario, so which scenarios the batches happen to play cannot make a run "identical".
- ``identical`` (exit 0): no loss fact differs in any scenario (the only differences allowed are ids after the last
  trained token of both views, which no loss reads), and every batch's gradients, compared at a fixed advantage
  (A = 1 for every sequence, so that the comparison does not depend on rewards), agree within the tolerance.
- ``not_applicable`` (exit 3): as identical, but the template shows no tool calls (no scenario has a call it can
  render), so nothing was said about tool turns.
- ``undetermined`` (exit 3): a batch compared nothing (B's gradient was zero).
- ``control`` (exit 3): ``--control`` replaced R with B for the gradient comparison, which then checks the
  comparison, not the template; the template's token facts are still reported (computed before the replacement).

Every verdict names what it holds for: the samples ("identical" for canonical ids says nothing about a sampler
that emits non-canonical splits, which re-encoding undoes whatever the template does), the thinking modes and
template kwargs played, and the ``--scenario`` filter.
"""

from __future__ import annotations

import json
from typing import Any

from tito_audit.errors import EXIT_FINDINGS, EXIT_INCOMPLETE, EXIT_OK

NOISE_FACTOR = 10.0  # identical: within this many times the measured noise floor
EXIT_CODES = {
    "corrupted": EXIT_FINDINGS,
    "identical": EXIT_OK,
    "not_applicable": EXIT_INCOMPLETE,
    "undetermined": EXIT_INCOMPLETE,
    "control": EXIT_INCOMPLETE,
}
HEADLINES = {
    "corrupted": "R gradient corrupted (re-tokenization changes what is trained)",
    "identical": "R gradient identical to B within the noise floor",
    "not_applicable": "not applicable to tool turns (the template shows no tool calls)",
    "undetermined": "undetermined (a batch compared nothing)",
    "control": "control (R := B): a check of the gradient comparison, not a verdict on the template",
}
# Token facts that change the loss: a trained token R drops, adds, moves out of the loss, or conditions on other ids.
FACT_KEYS = (
    "mismatched_trained",
    "flip_sampled_dropped",
    "flip_template_trained",
    "context_changed_trained",
    "naive_crashes",
)


def _fact_changes(facts: dict[str, Any] | None) -> int:
    return sum(int(facts.get(k, 0)) for k in FACT_KEYS) if facts else 0


def _facts_line(facts: dict[str, Any]) -> str:
    return (
        f"{facts['mismatched_trained']} trained tokens without partner, {facts['flip_sampled_dropped']} sampled tokens "
        f"dropped, {facts['flip_template_trained']} template tokens trained, {facts.get('context_changed_trained', 0)} "
        f"trained tokens whose context R changes, {facts.get('naive_crashes', 0)} episodes R could not rebuild"
    )


def _sampling(setup: dict[str, Any], config: dict[str, Any]) -> str:
    sampling = setup.get("sampling")
    if isinstance(sampling, dict):
        canonical = setup.get("canonical_turn_fraction")
        share = f"; {canonical:.0%} of their turns canonical" if canonical is not None else ""
        return f"the policy's own samples under {sampling.get('description', 'its sampler')}{share}"
    rate = float(config.get("noncanonical_rate") or 0.0)
    canonical_only = (
        "canonical samples only (the template's own tokenization); a sampler that emits non-canonical splits is not "
        "covered"
    )
    if rate <= 0:
        return canonical_only + ": rerun with --noncanonical-rate 0.05"
    splits = setup.get("noncanonical_splits") or {}
    split, total = int(splits.get("tokens", 0)), int(splits.get("sampled_tokens", 0))
    if not split:
        return (
            f"{canonical_only}: --noncanonical-rate {rate:g} split no sampled token (0 of {total:,}), so nothing about "
            "such a sampler was measured; rerun with a higher rate (0.05)"
        )
    return (
        f"samples with {split:,} of {total:,} sampled tokens ({split / max(1, total):.2%}) split non-canonically "
        f"(--noncanonical-rate {rate:g})"
    )


def kwargs_line(template_kwargs: dict[str, Any]) -> str:
    """``-k enable_thinking=false``, as the command line writes it."""
    return " ".join(f"-k {k}={json.dumps(v)}" for k, v in template_kwargs.items())


def _coverage(setup: dict[str, Any]) -> str:
    cov = setup.get("coverage")
    if not cov:
        return ""
    modes = cov["thinking_modes"]
    if len(modes) > 1:
        played = f"thinking modes {', '.join(modes)} (the reasoning scenarios in each)"
    elif modes != ["default"]:
        played = f"thinking mode {modes[0]} (the reasoning scenarios; the others in the default mode)"
    elif cov["thinking_switches"]:
        played = f"the default mode only ({', '.join(cov['thinking_switches'])} not played: --thinking unset)"
    elif cov.get("template_kwargs"):
        played = "the mode -k sets (no other reasoning switch)"
    else:
        played = "the template's default mode (it has no reasoning switch)"
    if cov.get("template_kwargs"):
        played += " with " + kwargs_line(cov["template_kwargs"])
    out = f"; {played}"
    if cov.get("filtered"):
        out += (
            f"; {cov['filtered']} played (--scenario {' '.join(cov['filter'])}): the gradients cover only those, the "
            f"token facts all {cov['scenarios']}"
        )
    return out


def holds_for(setup: dict[str, Any], config: dict[str, Any]) -> str:
    """Which samples, thinking modes, template kwargs and scenarios the verdict describes."""
    if config.get("control"):
        return "the control (R := B), whatever the samples: nothing about the template" + _coverage(setup)
    return _sampling(setup, config) + _coverage(setup)


def _outside_filter(facts: dict[str, Any], setup: dict[str, Any]) -> list[str]:
    """Affected scenarios the batches never played (``--scenario`` left them out)."""
    prefixes = (setup.get("coverage") or {}).get("filter") or []
    if not prefixes:
        return []
    return [
        name
        for name, row in facts.get("by_scenario", {}).items()
        if _fact_changes(row) and not any(name.startswith(p) for p in prefixes)
    ]


def _fact_reasons(setup: dict[str, Any]) -> list[str]:
    """One reason per set of token facts (every scenario's canonical ids, the sampled episodes) that changes the
    loss, naming affected scenarios that ``--scenario`` left out."""
    template_facts, sampled_facts = setup.get("token_facts"), setup.get("sampled_token_facts")
    cov = setup.get("coverage") or {}
    every = f"all {cov['scenarios']} scenarios" if cov else "every scenario"
    if cov.get("stopped_episodes"):  # episodes cut or ended at messages the loop appended (``audit.episode_cuts``)
        every += f" and {cov['stopped_episodes']} stopped at messages the loop appended"
    reasons: list[str] = []
    for label, facts in ((f"{every}, canonical ids", template_facts), ("the sampled episodes", sampled_facts)):
        if facts and _fact_changes(facts):
            outside = _outside_filter(facts or {}, setup) if facts is template_facts else []
            where = f"; {len(outside)} of the affected scenarios are outside --scenario, e.g. " if outside else ""
            reasons.append(f"token facts ({label}): {_facts_line(facts)}{where}{outside[0] if outside else ''}")
    return reasons


def _beyond(beyond: list[tuple[int, float]], tolerance: float, suffix: str = "") -> str:
    """The batch whose gradient differs most, as a reason."""
    k, e = max(beyond, key=lambda ke: ke[1])
    return f"gradient: rel. error {e:.3g} in batch {k}{suffix} (tolerance {tolerance:.1g})"


def _control(
    steps: list[dict[str, Any]], facts: list[str], beyond: list[tuple[int, float]], empty: list[int], tolerance: float
) -> tuple[str, bool, list[str]]:
    """A ``--control`` run (R := B): the headline, whether B's gradient was reproduced, and the reasons."""
    passed = bool(steps) and not beyond and not empty
    headline = HEADLINES["control"] + (
        ": B's gradient reproduced within the noise floor"
        if passed
        else ": FAILED, R := B and yet the gradients differ or compared nothing; the comparison is not exact here"
    )
    # The template's facts were computed before R was replaced: reported, but the run compared B with itself.
    reasons = [f"the template's own {r} (computed before --control replaced R with B)" for r in facts]
    if beyond:
        reasons.append(_beyond(beyond, tolerance, " with R := B"))
    return headline, passed, reasons


def _verdict(
    steps: list[dict[str, Any]],
    setup: dict[str, Any],
    facts: list[str],
    beyond: list[tuple[int, float]],
    empty: list[int],
    tolerance: float,
) -> tuple[str, list[str]]:
    """The verdict of a run that is not a control, and its reasons: facts and gradients beyond the tolerance make it
    ``corrupted``; a batch that compared nothing ``undetermined``; no renderable tool call ``not_applicable``."""
    reasons = list(facts)
    if beyond:
        reasons.append(_beyond(beyond, tolerance))
    if reasons:
        return "corrupted", reasons
    if empty or not steps:
        return "undetermined", [f"batch(es) {', '.join(map(str, empty))}: B's gradient is zero, nothing was compared"]
    if setup.get("template_parse_rate") is None:
        return "not_applicable", ["no scenario has a tool call the template can render (R's parse rate is n/a)"]
    return "identical", []


def decide(steps: list[dict[str, Any]], setup: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    noise = max((s["noise_floor"] for s in steps), default=0.0)
    tolerance = NOISE_FACTOR * noise
    cov = setup.get("coverage") or {}
    facts = _fact_reasons(setup)
    errors = [(s["step"], s["gradient"]["rel_error"]) for s in steps]
    beyond = [(k, e) for k, e in errors if e is not None and e > tolerance]
    empty = [k for k, e in errors if e is None]
    headline = None
    passed = None
    if config.get("control"):
        verdict = "control"
        headline, passed, reasons = _control(steps, facts, beyond, empty, tolerance)
    else:
        verdict, reasons = _verdict(steps, setup, facts, beyond, empty, tolerance)
    out = {
        "verdict": verdict,
        "exit_code": EXIT_CODES[verdict],
        "headline": headline or HEADLINES[verdict],
        "reasons": reasons,
        "holds_for": holds_for(setup, config),
        "filtered": cov.get("filtered"),
        "tolerance": tolerance,
    }
    if passed is not None:
        out["control_passed"] = passed
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
        split = bool((setup.get("noncanonical_splits") or {}).get("tokens", config.get("noncanonical_rate")))
        noncanonical = split or (setup.get("canonical_turn_fraction") or 1.0) < 1.0
        if template_changes and not split:
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
    elif verdict == "control":
        out.append(f"this run checked the comparison (R := B); for the template's verdict run `tito-audit rl {model}`")
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
