"""``tito-audit replay LOG --model MODEL``: is MY training loop silently broken? Audit a real rollout log."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from tito_audit.cli.audit import FAIL_ON
from tito_audit.cli.params import FORMAT_NAMES, one_of
from tito_audit.errors import EXIT_FINDINGS, EXIT_OK, EXIT_OPERATIONAL, AuditError


def _log_formats() -> tuple[str, ...]:
    """Asked at parse time: importing the replay package for ``--help`` would import transformers."""
    from tito_audit.replay import ADAPTERS

    return ADAPTERS


EXIT_MALFORMED = 3  # some records could not be read; every other episode was replayed and is in the report


def register(app: typer.Typer) -> None:
    app.command("replay", help="Replay a rollout log (JSONL, .gz or Parquet) against a correct token buffer.")(replay)


def replay(
    log: Annotated[
        Path, typer.Argument(help="Rollout log: JSONL (optionally gzip) or Parquet, one episode per record.")
    ],
    model: Annotated[str, typer.Option("--model", "-m", help="The model whose tokenizer and template the loop used.")],
    log_format: Annotated[
        str, typer.Option("--log-format", help="auto | native | vllm | skyrl.", callback=one_of(_log_formats))
    ] = "auto",
    field_map: Annotated[
        list[str] | None,
        typer.Option("--map", help="NATIVE=PATH field mapping (comma separated, repeatable, or @file.json)."),
    ] = None,
    what_if: Annotated[bool, typer.Option("--what-if/--no-what-if", help="Also re-render + re-encode (naive).")] = True,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Worker processes (1: in this process).")] = 2,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help=" | ".join(FORMAT_NAMES) + " (default: the one --output's suffix names, else terminal)",
            callback=one_of(FORMAT_NAMES),
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report here (checked before any work).")
    ] = None,
    fail_on: Annotated[
        str, typer.Option("--fail-on", help="Exit 1 on findings at or above: warn | error.", callback=one_of(FAIL_ON))
    ] = "error",
    suppressions: Annotated[
        Path | None, typer.Option("--suppressions", help=r"TOML of \[\[suppress]] entries.")
    ] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", help="A previous --format json replay report.")] = None,
    offline: Annotated[bool, typer.Option("--offline", help="Never touch the network.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Every kept finding with its token strip.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the verdict line.")] = False,
) -> None:
    """Replay LOG: trained vs sampled tokens per episode and turn, and what naive re-tokenization would do."""
    from rich.console import Console

    from tito_audit.cli.output import check_output, check_verbosity, emit, output_console, report_format
    from tito_audit.formats import render_report
    from tito_audit.gate import Gate, gating_findings
    from tito_audit.replay import FieldMap, LogError, MapError, ReplayContext, build_report, replay_log
    from tito_audit.sources.load import load

    def fail(message: str) -> None:
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(EXIT_OPERATIONAL)

    check_verbosity(verbose, quiet)
    fmt = report_format(fmt, output)
    check_output(output)
    try:
        fmap = FieldMap.parse(field_map or [])
    except MapError as exc:
        fail(str(exc))
    if not log.is_file():
        fail(f"{log}: no such log file")
    try:
        gate = Gate.load(suppressions, baseline)
    except AuditError as exc:
        fail(exc.one_line())
    try:
        loaded = load(model, offline=offline)
    except AuditError as exc:
        fail(exc.one_line())
    ctx = ReplayContext.from_model(loaded, whatif=what_if)
    err = Console(stderr=True)
    started = time.perf_counter()
    try:
        if quiet or not err.is_terminal:
            totals = replay_log(log, ctx, fmt=log_format, field_map=fmap, workers=workers)
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(
                TextColumn("replaying {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("records"),
                TimeElapsedColumn(),
                console=err,
                transient=True,
            ) as progress:
                task = progress.add_task(log.name, total=None)
                totals = replay_log(
                    log, ctx, fmt=log_format, field_map=fmap, workers=workers,
                    on_records=lambda n: progress.advance(task, n),
                )  # fmt: skip
    except LogError as exc:
        fail(str(exc))
    report = build_report(totals, loaded, str(log), ctx.renderer.token_texts, time.perf_counter() - started)
    lines = gate.apply(report, fail_on)
    if fmt == "terminal" and output is None:
        render_report(report, "terminal", console=output_console(), verbose=verbose, quiet=quiet)
    else:
        emit(render_report(report, fmt, verbose=verbose, quiet=quiet), output)
    for line in lines:
        typer.echo(line, err=True)
    malformed = [f for c in report.models[0].checks if c.id == "replay_records" for f in c.active_findings]
    if totals.malformed:
        shown = ", ".join(f"{f.scenario}: {f.message}" for f in malformed[:3])
        typer.echo(f"error: {log}: {totals.malformed} of {totals.records} record(s) malformed ({shown})", err=True)
    if totals.records == 0:
        typer.echo(f"error: {log}: the log holds no record", err=True)
        raise typer.Exit(EXIT_OPERATIONAL)
    if malformed:
        raise typer.Exit(EXIT_MALFORMED)
    gating = [g for g in gating_findings(report, fail_on) if g[1].id != "replay_records"]
    raise typer.Exit(EXIT_FINDINGS if gating else EXIT_OK)
