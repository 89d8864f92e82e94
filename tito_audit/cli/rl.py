"""``tito-audit rl MODEL``: a short GRPO-style loop comparing the buffered and the re-tokenized gradient.

Exit codes: 0 identical, 1 corrupted, 2 operational error (bad option, model not found, the rl extra missing),
3 undetermined, not applicable to tool turns, or a ``--control`` run (``report/rl_verdict.py``). Options are
checked before torch or the model is loaded.
"""

# ruff: noqa: RUF009  (the options dataclass's defaults are typer declarations: see RLOptions)
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from tito_audit.cli.options import command, search_option, search_seed_option, template_kwarg_option, thinking_option
from tito_audit.cli.params import contradiction, folder_problem, number, one_of, parse_kwargs
from tito_audit.errors import EXIT_INTERRUPTED, EXIT_OPERATIONAL, AuditError

# What ``pip install -e ".[rl]"`` adds; torch first from the CPU index so that nothing pulls CUDA packages.
RL_EXTRA = ("torch", "matplotlib", "mpmath")
# The largest values of rl's numeric options (``params.number``): past them a run means nothing, or never ends.
MAX_STEPS = 100_000
MAX_BATCH = 4096  # groups, responses per group
MAX_LR = 100.0
MAX_SEED = 2**32 - 1  # what every generator the loop seeds accepts (numpy's)
MAX_TOKENS = 1_000_000
MAX_WIDTH = 65_536
MAX_DEPTH = 1024
RL_INSTALL = 'pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e ".[rl]"'


def _fmt(x: Any, spec: str = ".6f") -> str:
    return "n/a" if x is None else format(x, spec)


def _print_summary(result: Any) -> None:
    from rich.console import Console

    con = Console(soft_wrap=True)  # one line per item, also in CI logs
    setup = result.setup
    con.print(
        f"[bold]{result.config['model']}[/]  policy: {setup['policy']} ({setup['dtype']})  vocab: {setup['vocab']} "
        f"({setup['model_vocab']:,} ids)  device: {setup['device']}  threads: {setup['torch_threads']}"
    )
    _print_token_facts(con, setup)
    if setup.get("quality_gates"):
        _print_gates(con, setup["quality_gates"])
    con.print(f"gradients compared at a fixed advantage: {setup['comparison_advantage']}", highlight=False)
    for rec in result.steps:
        _print_step(con, rec)
    if result.steps and "probability_diagnostics" in result.steps[0]:
        con.print(f"probability diagnostics: {result.steps[0]['probability_diagnostics']}")
    _print_verdict(con, result.summary)
    for f in result.files:
        con.print(f"wrote {f}")


def _facts_scope(setup: dict[str, Any]) -> str:
    """Which scenarios the facts line covers: all the template renders (whatever --scenario plays), or the sampled."""
    from tito_audit.report.rl_verdict import kwargs_line

    if "sampled_token_facts" in setup:
        return "the sampled episodes"
    cov = setup.get("coverage") or {}
    modes = cov.get("thinking_modes") or ["default"]
    scope = f"all {cov.get('scenarios', '?')} scenarios the template renders, thinking modes {', '.join(modes)}"
    if cov.get("template_kwargs"):
        scope += ", " + kwargs_line(cov["template_kwargs"])
    if cov.get("filtered"):
        scope += f" ({cov['filtered']} played)"
    return scope + "; template as the model"


def _print_token_facts(con: Any, setup: dict[str, Any]) -> None:
    """The model-free facts first, then the scenarios they come from, worst first."""
    facts = setup.get("sampled_token_facts") or setup["token_facts"]
    rate = setup.get("template_parse_rate")
    con.print(
        f"token facts ({_facts_scope(setup)}; model-free, exact): {facts['scenarios_affected']}/{facts['scenarios']} "
        f"scenarios, {facts['sequences_affected']}/{facts['sequences']} sequences, {facts['turns_affected']}/"
        f"{facts['turns']} turns affected"
        + (f" (+{facts['turns_context_only']} whose context alone changes)" if facts["turns_context_only"] else "")
        + f"; {facts['mismatched_trained']} of {facts['b_trained']} trained tokens "
        f"without partner; {facts['context_changed_trained']} trained tokens whose context R changes; flips: sampled "
        f"dropped {facts['flip_sampled_dropped']}, template trained {facts['flip_template_trained']}; shape "
        f"mismatches {facts['shape_mismatch_sequences']}; R tool-call parse rate over every scenario "
        + ("n/a (no call the template can show)" if rate is None else f"{rate:.0%}"),
        highlight=False,
        markup=False,
    )
    if facts.get("sequences_after_training_only"):
        con.print(
            f"    {facts['sequences_after_training_only']} of the affected sequences differ only after their last "
            "trained token (no loss reads those ids)",
            highlight=False,
            markup=False,
        )
    modes = facts.get("by_mode") or {}
    if len(modes) > 1:
        for mode, row in modes.items():
            con.print(
                f"    mode {mode}: {row['sequences_affected']}/{row['sequences']} sequences affected, "
                f"{row['mismatched_trained']} trained tokens without partner, {row['context_changed_trained']} "
                "with a changed context",
                highlight=False,
                markup=False,
            )
    affected = sorted(
        ((n, r) for n, r in facts["by_scenario"].items() if r["sequences_affected"]),
        key=lambda nr: (
            -nr[1]["mismatched_trained"]
            - nr[1]["flip_sampled_dropped"]
            - nr[1]["flip_template_trained"]
            - nr[1]["context_changed_trained"]
        ),
    )
    for name, row in affected[:6]:
        con.print(
            f"    {name}: {row['mismatched_trained']} tokens without partner, dropped "
            f"{row['flip_sampled_dropped']}, template-trained {row['flip_template_trained']}, context changed "
            f"{row['context_changed_trained']} ({row['turns_affected']}/{row['turns']} turns)",
            highlight=False,
            markup=False,
        )
    if len(affected) > 6:
        con.print(f"    ... and {len(affected) - 6} more affected scenarios (metrics.json: token_facts)", markup=False)


def _print_gates(con: Any, gates: dict[str, Any]) -> None:
    measured = gates["measured"]
    con.print(
        "quality gates (batch 0) "
        + ("[green]passed[/]" if gates["passed"] else "[red]failed[/]: " + "; ".join(gates["failed"]))
        + f" (SFT loss {_fmt(measured['sft_loss_final'], '.3f')}, canonical turns "
        f"{_fmt(measured['canonical_turn_fraction'], '.0%')}, parse rate "
        f"{_fmt(measured['tool_call_parse_rate'], '.0%')}, p<0.5 {_fmt(measured['p_below_0.5_fraction'], '.0%')})"
    )


def _print_step(con: Any, rec: dict[str, Any]) -> None:
    """One line per batch, then its KL, low-probability, update and critical-token lines when computed."""
    gradient, alignment, mismatch = rec["gradient"], rec["alignment"], rec["logp_mismatch"]
    line = (
        f"batch {rec['step']}: rel.error {_fmt(gradient['rel_error'], '.3g')} (noise floor {rec['noise_floor']:.1g}) "
        f"cosine {_fmt(gradient['cosine'], '.4f')}  affected {alignment['sequences_affected']}/"
        f"{alignment['sequences']} seq, {alignment['turns_affected']}/{alignment['turns']} turns  |dlogp| max "
        f"{_fmt(mismatch.get('abs_dlogp_max'), '.4f')}  rho [{_fmt(mismatch.get('rho_min'), '.3f')}, "
        f"{_fmt(mismatch.get('rho_max'), '.3f')}]"
    )
    calls = rec["tool_calls"]
    if calls["turns_expected"]:
        line += f"  calls parsed {calls['turns_parsed']}/{calls['turns_expected']}"
    if "shadow_drift" in rec:
        line += f"  drift {_fmt(rec['shadow_drift'], '.4f')}"
    con.print(line, highlight=False)
    if "kl" in rec:
        _print_kl(con, rec["kl"])
    if "low_prob" in rec:
        _print_low_prob(con, rec["low_prob"])
    if "updates" in rec:
        _print_updates(con, rec["updates"])
    if "critical" in rec:
        critical, on = rec["critical"], rec["mismatch_on"]
        con.print(
            f"    critical tokens (outcome-flip test, this tool's operationalisation): {critical['critical']}/"
            f"{critical['tested_positions']} swaps flip the greedy outcome; null swap (greedy vs sampled outcome) "
            f"flips {critical['null_flips']}; reference certainty J over |V|={critical['vocab_size']:,} "
            f"{_fmt(critical['J_mean_critical'], '.3f')} vs {_fmt(critical['J_mean_other'], '.3f')}, dJ "
            f"{_fmt(critical['dJ_mean_critical'], '+.4f')} vs {_fmt(critical['dJ_mean_other'], '+.4f')}, KL weight "
            f"J^{critical['beta']:g} {_fmt(critical['kl_weight_mean_critical'], '.3g')} vs "
            f"{_fmt(critical['kl_weight_mean_other'], '.3g')}; R-mistrained B tokens: {on['mismatched_b_tokens']}, of "
            f"which p<{on['eta']}: {on['low_probability']}, critical: {on['critical']}/{on['tested_for_critical']} "
            "tested",
            highlight=False,
        )


def _print_kl(con: Any, kl: dict[str, Any]) -> None:
    con.print(
        "    KL token mean ± SE: "
        + "  ".join(f"{k} {kl[k + '_mean']:+.2e} ± {kl[k + '_se']:.1e}" for k in ("k1", "k2", "k3", "exact"))
        + f"  (significance: {kl['significance']})",
        highlight=False,
        markup=False,
    )
    bias = kl.get("bias", {})
    if bias.get("positions"):
        con.print(
            f"    KL under this sampler, exact at {bias['positions']} positions: KL {bias['kl']:.3g}; "
            + ", ".join(
                f"E[{k}] {bias['expected_' + k]:.3g} (bias {bias['bias_' + k]:+.2g})" for k in ("k1", "k2", "k3")
            )
            + f"; truncated mass {bias['truncated_mass']:.2%}",
            highlight=False,
            markup=False,
        )
    if kl.get("warning"):
        con.print(f"    [yellow]warning:[/] {kl['warning']}")


def _print_low_prob(con: Any, low: dict[str, Any]) -> None:
    parts = []
    for sign, label in (("positive", "A>0"), ("negative", "A<0")):
        side = low[sign]
        if side["unique_positions"]:
            parts.append(
                f"{label}: p<{low['eta']} {_fmt(side['mean_grad_norm_low'], '.3g')} ({side['low_positions']}) vs "
                f"{_fmt(side['mean_grad_norm_high'], '.3g')} ({side['high_positions']})"
            )
    con.print(
        f"    low-p tokens ({_fmt(low['low_fraction'], '.0%')} of tokens): mean ||e_y - pi|| per de-duplicated "
        f"position, " + "; ".join(parts or ["no token with a non-zero advantage"]),
        highlight=False,
    )


def _print_updates(con: Any, upd: dict[str, Any]) -> None:
    if "skipped" in upd:
        con.print(f"    AR / Lopti: {upd['skipped']}")
        return
    lopti = upd["lopti"]
    joint, staged = lopti["mean_dlogp_joint"], lopti["mean_dlogp_lopti"]
    con.print(
        f"    AR(alpha={upd['alpha']}) cosine to plain {_fmt(upd['advantage_reweighted']['cosine_to_plain'], '.3f')}; "
        f"Lopti vs joint update (plain steps, lr {lopti['learning_rate']:.3g} so the joint step has norm "
        f"{lopti['step_norm_joint']:g}; no PPO ratio or clipping): cosine "
        f"{_fmt(lopti['update_cosine_to_joint'], '.3f')}"
        f", high-p mean dlogp A>0 {_fmt(joint['high_positive'], '+.2e')} vs {_fmt(staged['high_positive'], '+.2e')}, "
        f"A<0 {_fmt(joint['high_negative'], '+.2e')} vs {_fmt(staged['high_negative'], '+.2e')} (joint vs Lopti)",
        highlight=False,
    )


def _print_verdict(con: Any, summary: dict[str, Any]) -> None:
    if summary.get("interrupted"):
        con.print(f"[bold magenta]INCOMPLETE: {summary['interrupted']}[/]", highlight=False)
    colour = {"corrupted": "red", "identical": "green"}.get(summary["verdict"], "yellow")
    con.print(
        f"[{colour}]{summary['headline']}[/]: max rel.error {_fmt(summary['rel_error_max'], '.3g')}, tolerance "
        f"{summary['identical_tolerance']:.1g} (10 x noise floor), min cosine {_fmt(summary['cosine_min'], '.4f')}, "
        f"{summary['step_seconds_mean']:.2f} s/step"
    )
    for reason in summary["reasons"]:
        con.print(f"  because {reason}", highlight=False, markup=False)
    if summary.get("filtered"):
        con.print(summary["filtered"] + " (--scenario)", highlight=False, markup=False)
    con.print(f"holds for: {summary['holds_for']}", highlight=False, markup=False)
    steps = summary["parse_rate_batches_steps"]
    which = f"batch {steps[0]}" if len(steps) == 1 else f"batches {steps[0]}-{steps[-1]}"
    con.print(
        f"R tool-call parse rates: every scenario {_fmt(summary['parse_rate_every_scenario'], '.0%')} (the "
        f"template's own turns, canonical ids); {which} "
        f"{_fmt(summary['parse_rate_batches'], '.0%')} (the turns those batches trained)",
        highlight=False,
        markup=False,
    )
    for line in summary["what_to_do"]:
        con.print(f"what to do: {line}", highlight=False, markup=False)


@dataclass(frozen=True)
class RLOptions:
    """``tito-audit rl``'s parameters, in help order (``options.command`` makes them the typer signature). The
    defaults are typer's declarations, read once for the signature; typer always passes every value."""

    model: str = typer.Argument(..., help="Tokenizer/template: local folder, bundled name or Hub id.")
    steps: int = typer.Option(3, "--steps", help="Policy-gradient steps.", callback=number(1, MAX_STEPS))
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N.")
    weights: str | None = typer.Option(None, "--weights", help="Real causal LM weights (folder or Hub id).")
    ref: str | None = typer.Option(
        None, "--ref", help="Reference weights for the KL section (default: the step-0 policy)."
    )
    dtype: str = typer.Option(
        "float32",
        "--dtype",
        help="Policy and gradient precision: float32 or bfloat16.",
        callback=one_of(("float32", "bfloat16")),
    )
    warmup: int = typer.Option(
        0, "--warmup", help="SFT steps on the scenarios before sampling real rollouts.", callback=number(0, MAX_STEPS)
    )
    save_policy: Path | None = typer.Option(None, "--save-policy", help="Write the (warmed-up) policy here.")
    shadow: bool = typer.Option(False, "--shadow", help="Also step a copy with the R gradient; report drift.")
    noncanonical_rate: float = typer.Option(
        0.0, "--noncanonical-rate", help="Rate of non-canonical splits.", callback=number(0.0, 1.0)
    )
    generation_kwargs: str | None = typer.Option(None, "--generation-kwargs", help="JSON sampling settings.")
    groups: int = typer.Option(2, "--groups", help="GRPO groups per step.", callback=number(1, MAX_BATCH))
    group_size: int = typer.Option(4, "--group-size", help="Responses per group.", callback=number(2, MAX_BATCH))
    lr: float = typer.Option(
        1e-3,
        "--lr",
        help="Learning rate of the policy steps (Adam on the stand-in, SGD with --weights).",
        callback=number(0.0, MAX_LR, above=True),
    )
    warmup_lr: float = typer.Option(
        3e-3,
        "--warmup-lr",
        help="Learning rate of the --warmup SFT steps (Adam).",
        callback=number(0.0, MAX_LR, above=True),
    )
    seed: int = typer.Option(
        0,
        "--seed",
        help="Seed of the stand-in's initialisation, the sampling and the episode order.",
        callback=number(0, MAX_SEED),
    )
    vocab: str = typer.Option(
        "compact", "--vocab", help="compact (ids that occur) or full.", callback=one_of(("compact", "full"))
    )
    max_new_tokens: int = typer.Option(
        96,
        "--max-new-tokens",
        help="Tokens a sampled turn may have (--generation-kwargs can set it too).",
        callback=number(1, MAX_TOKENS),
    )
    hidden: int = typer.Option(
        64, "--hidden", help="Stand-in model width (no --weights).", callback=number(1, MAX_WIDTH)
    )
    layers: int = typer.Option(
        2, "--layers", help="Stand-in model depth (no --weights).", callback=number(1, MAX_DEPTH)
    )
    include_injection: bool = typer.Option(
        False, "--include-injection", help="Also use scenarios with control-token text in content."
    )
    scenario: list[str] = typer.Option(
        [],
        "--scenario",
        help="Scenario id prefix the batches play (repeatable); the token facts still cover every scenario.",
    )
    thinking: str = thinking_option()
    template_kwarg: list[str] = template_kwarg_option()
    search: int | None = search_option()
    search_seed: int = search_seed_option()
    rollouts: str = typer.Option(
        "auto", "--rollouts", help="auto, sample (the policy samples) or template (the template's own turns)."
    )
    control: bool = typer.Option(
        False, "--control", help="R := B: checks the comparison (exit 3, verdict control), not the template."
    )
    out: Path | None = typer.Option(None, "--out", help="Folder for metrics.json and PNG plots.")
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON.")


def rl(o: RLOptions, given: frozenset[str]) -> None:
    """Run a short GRPO-style loop and compare the buffered (B) and re-tokenized (R) gradients.

    Exit 0 identical, 1 corrupted, 2 operational error, 3 undetermined, not applicable to tool turns, or --control.
    """
    from tito_audit.audit.context import SEARCH_BUDGET
    from tito_audit.cli.output import check_output_folder
    from tito_audit.rl.config import RLConfig

    if o.weights is not None:
        for name, flag in (("hidden", "--hidden"), ("layers", "--layers")):
            if name in given:
                contradiction("--weights", flag, f"{flag} shapes the stand-in model, which --weights replaces")
    for flag, spec in (("--weights", o.weights), ("--ref", o.ref)):
        problem = folder_problem(spec, flag)
        if problem is not None:
            print(f"error: {problem}", file=sys.stderr)
            raise typer.Exit(EXIT_OPERATIONAL)
    check_output_folder(o.out, "--out")
    check_output_folder(o.save_policy, "--save-policy")
    cfg = RLConfig(
        model=o.model,
        steps=o.steps,
        device=o.device,
        weights=o.weights,
        ref=o.ref,
        dtype=o.dtype,
        warmup=o.warmup,
        save_policy=str(o.save_policy) if o.save_policy else None,
        shadow=o.shadow,
        noncanonical_rate=o.noncanonical_rate,
        generation_kwargs=o.generation_kwargs,
        groups=o.groups,
        group_size=o.group_size,
        lr=o.lr,
        warmup_lr=o.warmup_lr,
        seed=o.seed,
        vocab=o.vocab,
        max_new_tokens=o.max_new_tokens,
        hidden=o.hidden,
        layers=o.layers,
        include_injection=o.include_injection,
        scenarios=tuple(o.scenario),
        thinking=o.thinking,
        template_kwargs=parse_kwargs(o.template_kwarg),
        search=SEARCH_BUDGET if o.search is None else o.search,
        search_seed=o.search_seed,
        control=o.control,
        rollouts=o.rollouts,
        out_dir=str(o.out) if o.out else None,
    )
    try:
        cfg.validate()  # before torch and the model are loaded
    except AuditError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        raise typer.Exit(EXIT_OPERATIONAL) from None
    try:
        from tito_audit.policy.model import resolve_device
        from tito_audit.rl import run_rl
        from tito_audit.rl.loop import RLInterrupted
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in RL_EXTRA:
            raise
        print(f"error: tito-audit rl needs {exc.name} (the rl extra): {RL_INSTALL}", file=sys.stderr)
        raise typer.Exit(EXIT_OPERATIONAL) from None
    from rich.progress import Progress

    try:
        resolve_device(cfg.device)  # a CUDA device that is not there fails before the model loads
        with Progress(transient=True, disable=o.json_out) as bar:
            task = bar.add_task("RL steps", total=o.steps)
            result = run_rl(
                cfg,
                log=(lambda m: print(m, file=sys.stderr)) if o.json_out else bar.console.print,  # --json: JSON alone
                progress=lambda done, total: bar.update(task, completed=done),
            )
    except AuditError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        raise typer.Exit(EXIT_OPERATIONAL) from None
    except RLInterrupted as stop:  # the finished steps are summarised (and written), marked incomplete
        if stop.result is None:
            print(f"{stop}: no step finished, nothing written", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        _show(stop.result, o.json_out)
        kept = f"; kept in {o.out / 'metrics.json'}" if o.out is not None else ""
        print(f"{stop}: the finished steps are summarised above{kept} (marked incomplete)", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    _show(result, o.json_out)
    raise typer.Exit(result.summary["exit_code"])


def _show(result: Any, json_out: bool) -> None:
    if json_out:
        shown = {"setup": result.setup, "summary": result.summary, "libraries": result.libraries}
        print(json.dumps(shown, default=str))
    else:
        _print_summary(result)
        from tito_audit.formats.labels import versions_text

        print(f"{versions_text(result.libraries)} · torch {result.libraries['torch']}")


def register(app: typer.Typer) -> None:
    app.command("rl")(command(RLOptions, rl))
