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

    con = Console(soft_wrap=True)  # one line per step, also in CI logs
    s, setup = result.summary, result.setup
    con.print(
        f"[bold]{result.config['model']}[/]  policy: {setup['policy']}  vocab: {setup['vocab']} "
        f"({setup['model_vocab']:,} ids)  device: {setup['device']}"
    )
    for rec in result.steps:
        g, a, lm = rec["gradient"], rec["alignment"], rec["logp_mismatch"]
        line = (
            f"step {rec['step']}: cosine {_fmt(g['cosine'])}  rel.error {_fmt(g['rel_error'])}  "
            f"affected {a['sequences_affected']}/{a['sequences']} seq  mismatched trained "
            f"{a['mismatched_trained']} ({a['mismatched_fraction']:.1%})  flips: dropped "
            f"{a['flip_sampled_dropped']}, template-trained {a['flip_template_trained']}  "
            f"|dlogp| max {_fmt(lm.get('abs_dlogp_max'), '.4f')}  rho [{_fmt(lm.get('rho_min'), '.3f')}, "
            f"{_fmt(lm.get('rho_max'), '.3f')}]"
        )
        if "shadow_drift" in rec:
            line += f"  drift {_fmt(rec['shadow_drift'], '.4f')}"
        con.print(line, highlight=False)
        if "kl" in rec:
            kl = rec["kl"]
            con.print(
                f"    KL token mean k1 {kl['k1_token_mean']:+.3e} k2 {kl['k2_token_mean']:.3e} "
                f"k3 {kl['k3_token_mean']:.3e}",
                highlight=False,
            )
            if kl.get("warning"):
                con.print(f"    [yellow]warning:[/] {kl['warning']}")
            lp = rec["low_prob"]
            if "share" in lp:
                con.print(
                    "    gradient share per p quartile (low->high): "
                    + " ".join(f"{x:.1%}" for x in lp["share"])
                    + "  reweighted: "
                    + " ".join(f"{x:.1%}" for x in lp["share_advantage_reweighted"])
                    + f"  Lopti p<{lp['lopti_eta']}: {lp['lopti_low_fraction']:.0%} of tokens, "
                    f"{lp['lopti_low_grad_share']:.0%} of gradient",
                    highlight=False,
                )
            crit = rec["critical"]
            low = ", ".join(f"{r['text']!r} dJ={r['dJ']:+.3f}" for r in crit["lowest"][:4])
            con.print(f"    critical tokens (lowest dJ): {low}", highlight=False)
    if result.steps and "probability_diagnostics" in result.steps[0]:
        con.print(f"probability diagnostics: {result.steps[0]['probability_diagnostics']}")
    verdict = (
        "[red]R gradient corrupted[/] (re-tokenization changes what is trained)"
        if s["corrupted"]
        else "[green]R gradient identical to B[/]"
    )
    con.print(
        f"{verdict}: min cosine {_fmt(s['cosine_min'])}, max rel.error {_fmt(s['rel_error_max'])}, "
        f"{s['step_seconds_mean']:.2f} s/step"
    )
    for f in result.files:
        con.print(f"wrote {f}")


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
    lr: float = typer.Option(1e-3, "--lr"),
    seed: int = typer.Option(0, "--seed"),
    vocab: str = typer.Option(
        "compact", "--vocab", help="compact (ids that occur) or full.", callback=one_of(("compact", "full"))
    ),
    max_new_tokens: int = typer.Option(48, "--max-new-tokens"),
    include_injection: bool = typer.Option(
        False, "--include-injection", help="Also use scenarios with control-token text in content."
    ),
    scenario: list[str] = typer.Option([], "--scenario", help="Scenario id prefix (repeatable)."),
    control: bool = typer.Option(False, "--control", help="R := B (cosine must be exactly 1)."),
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
        seed=seed,
        vocab=vocab,
        max_new_tokens=max_new_tokens,
        include_injection=include_injection,
        scenarios=tuple(scenario),
        control=control,
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
