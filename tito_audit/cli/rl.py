"""``tito-audit rl MODEL``: a short GRPO-style loop comparing the buffered and the re-tokenized gradient."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from tito_audit.cli.params import one_of
from tito_audit.errors import EXIT_OPERATIONAL, AuditError

# What ``pip install -e ".[rl]"`` adds; torch first from the CPU index so that nothing pulls CUDA packages.
RL_EXTRA = ("torch", "matplotlib")
RL_INSTALL = 'pip install torch --index-url https://download.pytorch.org/whl/cpu && pip install -e ".[rl]"'


def _fmt(x: Any, spec: str = ".6f") -> str:
    return "n/a" if x is None else format(x, spec)


def _print_summary(result: Any) -> None:
    from rich.console import Console

    con = Console(soft_wrap=True)  # one line per item, also in CI logs
    setup = result.setup
    con.print(
        f"[bold]{result.config['model']}[/]  policy: {setup['policy']}  vocab: {setup['vocab']} "
        f"({setup['model_vocab']:,} ids)  device: {setup['device']}  threads: {setup['torch_threads']}"
    )
    _print_token_facts(con, setup, result.summary["tool_call_parse_rate"])
    if setup.get("quality_gates"):
        _print_gates(con, setup["quality_gates"])
    for rec in result.steps:
        _print_step(con, rec)
    if result.steps and "probability_diagnostics" in result.steps[0]:
        con.print(f"probability diagnostics: {result.steps[0]['probability_diagnostics']}")
    _print_verdict(con, result.summary)
    for f in result.files:
        con.print(f"wrote {f}")


def _print_token_facts(con: Any, setup: dict[str, Any], rate: float | None) -> None:
    """The model-free facts first, then the scenarios they come from, worst first."""
    facts = setup.get("sampled_token_facts") or setup["token_facts"]
    where = "sampled episodes" if "sampled_token_facts" in setup else "every scenario, template as the model"
    con.print(
        f"token facts ({where}; model-free, exact): {facts['scenarios_affected']}/{facts['scenarios']} scenarios, "
        f"{facts['sequences_affected']}/{facts['sequences']} sequences, {facts['turns_affected']}/{facts['turns']} "
        f"turns affected; {facts['mismatched_trained']} of {facts['b_trained']} trained tokens without partner; "
        f"flips: sampled dropped {facts['flip_sampled_dropped']}, template trained {facts['flip_template_trained']}; "
        f"shape mismatches {facts['shape_mismatch_sequences']}; R tool-call parse rate "
        + ("n/a (no call the template can show)" if rate is None else f"{rate:.0%}"),
        highlight=False,
    )
    affected = sorted(
        ((n, r) for n, r in facts["by_scenario"].items() if r["sequences_affected"]),
        key=lambda nr: -nr[1]["mismatched_trained"] - nr[1]["flip_sampled_dropped"] - nr[1]["flip_template_trained"],
    )
    for name, row in affected[:6]:
        if row["sequences_affected"]:
            con.print(
                f"    {name}: {row['mismatched_trained']} tokens without partner, dropped "
                f"{row['flip_sampled_dropped']}, template-trained {row['flip_template_trained']} "
                f"({row['turns_affected']}/{row['turns']} turns)",
                highlight=False,
            )
    if len(affected) > 6:
        con.print(f"    ... and {len(affected) - 6} more affected scenarios (metrics.json: token_facts)")


def _print_gates(con: Any, gates: dict[str, Any]) -> None:
    measured = gates["measured"]
    con.print(
        "quality gates "
        + ("[green]passed[/]" if gates["passed"] else "[red]failed[/]: " + "; ".join(gates["failed"]))
        + f" (SFT loss {_fmt(measured['sft_loss_final'], '.3f')}, canonical turns "
        f"{_fmt(measured['canonical_turn_fraction'], '.0%')}, parse rate "
        f"{_fmt(measured['tool_call_parse_rate'], '.0%')}, p<0.5 {_fmt(measured['p_below_0.5_fraction'], '.0%')})"
    )


def _print_step(con: Any, rec: dict[str, Any]) -> None:
    """One line per batch, then its KL, low-probability and critical-token lines when they were computed."""
    gradient, alignment, mismatch = rec["gradient"], rec["alignment"], rec["logp_mismatch"]
    line = (
        f"batch {rec['step']}: rel.error {_fmt(gradient['rel_error'], '.3g')} (noise floor {rec['noise_floor']:.1g}) "
        f"cosine {_fmt(gradient['cosine'], '.4f')}  affected {alignment['sequences_affected']}/"
        f"{alignment['sequences']} seq, {alignment['turns_affected']}/{alignment['turns']} turns  |dlogp| max "
        f"{_fmt(mismatch.get('abs_dlogp_max'), '.4f')}  rho [{_fmt(mismatch.get('rho_min'), '.3f')}, "
        f"{_fmt(mismatch.get('rho_max'), '.3f')}]"
    )
    if "shadow_drift" in rec:
        line += f"  drift {_fmt(rec['shadow_drift'], '.4f')}"
    con.print(line, highlight=False)
    if "kl" in rec:
        kl = rec["kl"]
        con.print(
            "    KL token mean ± SE: "
            + "  ".join(f"{k} {kl[k + '_mean']:+.2e} ± {kl[k + '_se']:.1e}" for k in ("k1", "k2", "k3", "exact")),
            highlight=False,
        )
        if kl.get("warning"):
            con.print(f"    [yellow]warning:[/] {kl['warning']}")
    low = rec.get("low_prob", {})
    if "grad_norm_low" in low:
        reweighted = low["advantage_reweighted"]
        text = (
            f"    p<{low['eta']}: {low['low_fraction']:.0%} of tokens, gradient norm {low['grad_norm_low']:.3g} vs "
            f"{low['grad_norm_high']:.3g} for p>={low['eta']}; AR(alpha={low['alpha']}) cosine to plain "
            f"{_fmt(reweighted['cosine'], '.3f')}"
        )
        if "lopti" in low:
            lopti = low["lopti"]
            text += (
                f"; Lopti vs joint update cosine {_fmt(lopti['update_vs_joint']['cosine'], '.3f')}, high-p "
                f"dlogp {lopti['high_mean_dlogp_lopti']:+.2e} vs {lopti['high_mean_dlogp_joint']:+.2e}"
            )
        con.print(text, highlight=False)
    if "critical" in rec:
        critical, on = rec["critical"], rec["mismatch_on"]
        con.print(
            f"    critical tokens: {critical['critical']}/{critical['tested_positions']} tested positions flip the "
            f"outcome (certainty J {_fmt(critical['J_mean_critical'], '.3f')} vs "
            f"{_fmt(critical['J_mean_other'], '.3f')}); R-mistrained B tokens: {on['mismatched_b_tokens']}, of "
            f"which p<{on['eta']}: {on['low_probability']}, critical: {on['critical']}/{on['tested_for_critical']} "
            "tested",
            highlight=False,
        )


def _print_verdict(con: Any, summary: dict[str, Any]) -> None:
    verdict = (
        "[red]R gradient corrupted[/] (re-tokenization changes what is trained)"
        if summary["corrupted"]
        else "[green]R gradient identical to B[/] within the noise floor"
    )
    con.print(
        f"{verdict}: max rel.error {_fmt(summary['rel_error_max'], '.3g')}, tolerance "
        f"{summary['identical_tolerance']:.1g} (10 x noise floor), min cosine {_fmt(summary['cosine_min'], '.4f')}, "
        f"{summary['step_seconds_mean']:.2f} s/step"
    )


def rl(
    model: str = typer.Argument(..., help="Tokenizer/template: local folder, bundled name or Hub id."),
    steps: int = typer.Option(3, "--steps", help="Policy-gradient steps."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda.", callback=one_of(("auto", "cpu", "cuda"))),
    weights: str | None = typer.Option(None, "--weights", help="Real causal LM weights (folder or Hub id)."),
    warmup: int = typer.Option(0, "--warmup", help="SFT steps on the scenarios before sampling real rollouts."),
    save_policy: Path | None = typer.Option(None, "--save-policy", help="Write the (warmed-up) policy here."),
    shadow: bool = typer.Option(False, "--shadow", help="Also step a copy with the R gradient; report drift."),
    noncanonical_rate: float = typer.Option(0.0, "--noncanonical-rate", help="Rate of non-canonical splits."),
    generation_kwargs: str | None = typer.Option(None, "--generation-kwargs", help="JSON sampling settings."),
    groups: int = typer.Option(2, "--groups", help="GRPO groups per step."),
    group_size: int = typer.Option(4, "--group-size", help="Responses per group."),
    lr: float = typer.Option(
        1e-3, "--lr", help="Learning rate of the policy steps (Adam on the stand-in, SGD with --weights)."
    ),
    warmup_lr: float = typer.Option(3e-3, "--warmup-lr", help="Learning rate of the --warmup SFT steps (Adam)."),
    seed: int = typer.Option(
        0, "--seed", help="Seed of the stand-in's initialisation, the sampling and the episode order."
    ),
    vocab: str = typer.Option(
        "compact", "--vocab", help="compact (ids that occur) or full.", callback=one_of(("compact", "full"))
    ),
    max_new_tokens: int = typer.Option(
        96, "--max-new-tokens", help="Tokens a sampled turn may have (--generation-kwargs can set it too)."
    ),
    hidden: int = typer.Option(64, "--hidden", help="Stand-in model width (no --weights)."),
    layers: int = typer.Option(2, "--layers", help="Stand-in model depth (no --weights)."),
    include_injection: bool = typer.Option(
        False, "--include-injection", help="Also use scenarios with control-token text in content."
    ),
    scenario: list[str] = typer.Option([], "--scenario", help="Scenario id prefix (repeatable)."),
    rollouts: str = typer.Option(
        "auto", "--rollouts", help="auto, sample (the policy samples) or template (the template's own turns)."
    ),
    control: bool = typer.Option(False, "--control", help="R := B (must be identical within the noise floor)."),
    out: Path | None = typer.Option(None, "--out", help="Folder for metrics.json and PNG plots."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run a short GRPO-style loop and compare the buffered (B) and re-tokenized (R) gradients."""
    from rich.progress import Progress

    try:
        from tito_audit.rl import RLConfig, run_rl
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in RL_EXTRA:
            raise
        print(f"error: tito-audit rl needs {exc.name} (the rl extra): {RL_INSTALL}", file=sys.stderr)
        raise typer.Exit(EXIT_OPERATIONAL) from None

    cfg = RLConfig(
        model=model,
        steps=steps,
        device=device,
        weights=weights,
        warmup=warmup,
        save_policy=str(save_policy) if save_policy else None,
        shadow=shadow,
        noncanonical_rate=noncanonical_rate,
        generation_kwargs=generation_kwargs,
        groups=groups,
        group_size=group_size,
        lr=lr,
        warmup_lr=warmup_lr,
        seed=seed,
        vocab=vocab,
        max_new_tokens=max_new_tokens,
        hidden=hidden,
        layers=layers,
        include_injection=include_injection,
        scenarios=tuple(scenario),
        control=control,
        rollouts=rollouts,
        out_dir=str(out) if out else None,
    )
    try:
        with Progress(transient=True, disable=json_out) as bar:
            task = bar.add_task("RL steps", total=steps)
            result = run_rl(
                cfg,
                log=lambda m: bar.console.print(m),
                progress=lambda done, total: bar.update(task, completed=done),
            )
    except AuditError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        raise typer.Exit(EXIT_OPERATIONAL) from None
    if json_out:
        print(json.dumps({"setup": result.setup, "summary": result.summary}, default=str))
    else:
        _print_summary(result)


def register(app: typer.Typer) -> None:
    app.command("rl")(rl)
