"""``tito-audit replay LOG --model MODEL``: is MY training loop silently broken? Audit a real rollout log."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from tito_audit.cli.audit import FAIL_ON
from tito_audit.cli.options import command
from tito_audit.cli.params import (
    FORMAT_NAMES,
    MAX_COUNT,
    MAX_MEMORY_MB,
    MAX_RECORD_MB,
    MAX_WORKERS,
    check_date,
    contradiction,
    fail,
    folder_problem,
    number,
    one_of,
)
from tito_audit.errors import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, AuditError
from tito_audit.replay.log_formats import LOG_FORMATS  # each format registers itself (light: --help lists them)


def _log_formats() -> tuple[str, ...]:
    """Asked at parse time: importing the replay package for ``--help`` would import transformers."""
    from tito_audit.replay import ADAPTERS

    return ADAPTERS


EXIT_INCOMPLETE = 3  # some records could not be read, or some episodes not checked; the rest is in the report
ENGINES = ("local", "ray")
DTYPES = ("float32", "bfloat16")
MAX_EPISODES = 128  # tito_audit.replay.weights.session.DEFAULT_MAX_EPISODES (not imported: --help stays light)
NUMERIC_DRIFT_THRESHOLD = 0.01  # tito_audit.replay.weights.report.DEFAULT_THRESHOLD
MAX_RECORD_BYTES = 64 << 20  # tito_audit.replay.reader.MAX_RECORD_BYTES (not imported: --help stays light)
MAX_LOGPROB_GAP = 100.0  # a mean |delta log p| beyond this is no threshold: a log-prob gap of e^100


@dataclass(frozen=True)
class ReplayOptions:
    """``tito-audit replay``'s parameters, in help order (``options.command`` makes them the typer signature)."""

    logs: Annotated[
        list[str],
        typer.Argument(
            help="Rollout log(s): JSONL (optionally gzip) or Parquet, one episode per record; glob patterns "
            "('shards/*.parquet') read every match in order."
        ),
    ]
    model: Annotated[str, typer.Option("--model", "-m", help="The model whose tokenizer and template the loop used.")]
    log_format: Annotated[
        str, typer.Option("--log-format", help=f"auto | {LOG_FORMATS.choices()}.", callback=one_of(_log_formats))
    ] = "auto"
    field_map: Annotated[
        list[str] | None,
        typer.Option("--map", help="NATIVE=PATH field mapping (comma separated, repeatable, or @file.json)."),
    ] = None
    what_if: Annotated[bool, typer.Option("--what-if/--no-what-if", help="Also re-render + re-encode (naive).")] = True
    drift: Annotated[
        bool, typer.Option("--drift/--no-drift", help="Compare the engine's prompts with the template's rendering.")
    ] = True
    only_tito: Annotated[
        bool,
        typer.Option(
            "--only-tito",
            help="Only the TITO check (no what-if, drift or non-canonical check: no render, no tokenizer call "
            "per episode with engine prompt_ids); the verdict then says naive re-tokenization was not checked.",
        ),
    ] = False
    date: Annotated[
        str | None,
        typer.Option(
            "--date", help="Date the template saw (YYYY-MM-DD) for records without `date`.", callback=check_date
        ),
    ] = None
    max_record_mb: Annotated[
        float,
        typer.Option(
            "--max-record-mb",
            help="A record (line, Parquet row) over this is malformed.",
            callback=number(0.001, MAX_RECORD_MB),
        ),
    ] = MAX_RECORD_BYTES / 2**20
    workers: Annotated[
        int,
        typer.Option("--workers", "-w", help="Worker processes (1: in this process).", callback=number(1, MAX_WORKERS)),
    ] = 2
    engine: Annotated[
        str, typer.Option("--engine", help="local | ray (Parquet shards on Ray Data).", callback=one_of(ENGINES))
    ] = "local"
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="An existing Ray cluster (default: RAY_ADDRESS, or local).")
    ] = None
    ray_memory_mb: Annotated[
        float | None,
        typer.Option(
            "--ray-memory",
            help="Memory (MB) to reserve per Ray actor (docs/replay.md).",
            callback=number(0, MAX_MEMORY_MB, above=True),
        ),
    ] = None
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help=" | ".join(FORMAT_NAMES) + " (default: the one --output's suffix names, else terminal)",
            callback=one_of(FORMAT_NAMES),
        ),
    ] = None
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the report here (checked before any work).")
    ] = None
    fail_on: Annotated[
        str, typer.Option("--fail-on", help="Exit 1 on findings at or above: warn | error.", callback=one_of(FAIL_ON))
    ] = "error"
    suppressions: Annotated[Path | None, typer.Option("--suppressions", help=r"TOML of \[\[suppress]] entries.")] = None
    baseline: Annotated[Path | None, typer.Option("--baseline", help="A previous --format json replay report.")] = None
    weights: Annotated[
        str | None,
        typer.Option(
            "--weights",
            help="Your policy (a folder or Hub id): attribute the trainer/engine log-prob mismatch, compare "
            "gradients, and the KL estimators' bias (docs/replay.md: Your weights).",
        ),
    ] = None
    ref: Annotated[
        str | None, typer.Option("--ref", help="With --weights: the KL reference, for the estimators' bias.")
    ] = None
    sampling: Annotated[
        str | None,
        typer.Option(
            "--sampling",
            help='With --weights: the engine\'s sampler as JSON ({"temperature": 1, "top_k": 0, "top_p": 1}); '
            "else each record's `sampling`.",
        ),
    ] = None
    device: Annotated[str, typer.Option("--device", help="With --weights: auto | cpu | cuda | cuda:N.")] = "auto"
    dtype: Annotated[
        str, typer.Option("--dtype", help="With --weights: float32 | bfloat16.", callback=one_of(DTYPES))
    ] = "float32"
    max_episodes: Annotated[
        int,
        typer.Option(
            "--max-episodes",
            help="With --weights: a deterministic sample of this many episodes (0: all).",
            callback=number(0, MAX_COUNT),
        ),
    ] = MAX_EPISODES
    gradient: Annotated[
        bool, typer.Option("--gradient/--no-gradient", help="With --weights: compare gradients per episode.")
    ] = True
    numeric_drift_threshold: Annotated[
        float,
        typer.Option(
            "--numeric-drift-threshold",
            callback=number(0.0, MAX_LOGPROB_GAP),
            help="With --weights: warn when numeric drift dominates with a mean |delta log p| at or above this.",
        ),
    ] = NUMERIC_DRIFT_THRESHOLD
    offline: Annotated[bool, typer.Option("--offline", help="Never touch the network.")] = False
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Every kept finding with its token strip.")] = False
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the verdict line.")] = False


def register(app: typer.Typer) -> None:
    app.command("replay", help="Replay a rollout log (JSONL, .gz or Parquet) against a correct token buffer.")(
        command(ReplayOptions, replay)
    )


def replay(o: ReplayOptions, given: frozenset[str]) -> None:
    """Replay LOG: trained vs sampled tokens per episode and turn, and what naive re-tokenization would do."""
    import datetime as dt

    from rich.console import Console

    from tito_audit.cli.output import is_stdout
    from tito_audit.gate import Gate
    from tito_audit.rendering.clock import DEFAULT_DATE
    from tito_audit.replay import FieldMap, LogError, MapError, ReplayContext, build_report
    from tito_audit.replay.reader import expand
    from tito_audit.replay.run import ReplayInterrupted
    from tito_audit.sources.load import load

    name = o.logs[0] if len(o.logs) == 1 else f"{o.logs[0]} (+{len(o.logs) - 1})"
    fmt = _check_options(o, given)
    try:
        fmap = FieldMap.parse(o.field_map or [])
    except MapError as exc:
        fail(str(exc))
    weights_options = _weights_options(
        o.weights, o.ref, o.sampling, o.device, o.dtype, o.max_episodes, o.gradient, o.numeric_drift_threshold, fail
    )
    try:
        expand(o.logs)
    except LogError as exc:
        fail(str(exc))
    try:
        gate = Gate.load(o.suppressions, o.baseline)
    except AuditError as exc:
        fail(exc.one_line())
    try:
        loaded = load(o.model, offline=o.offline)
    except AuditError as exc:
        fail(exc.one_line())
    when = dt.datetime.combine(dt.date.fromisoformat(o.date), DEFAULT_DATE.time()) if o.date else None
    full = not o.only_tito
    ctx = ReplayContext.from_model(loaded, o.what_if and full, drift=o.drift and full, noncanonical=full, date=when)
    bound = int(o.max_record_mb * 2**20)
    err = Console(stderr=True)
    started = time.perf_counter()
    stopped: str | None = None
    try:
        totals = _replay_logs(o, ctx, fmap, bound, when, err)
    except LogError as exc:
        text = str(exc)
        fail(text if text.startswith(tuple(o.logs)) else f"{name}: {text}")
    except ReplayInterrupted as stop:  # the records replayed are reported, marked incomplete, then exit 130
        totals, stopped = stop.totals, f"interrupted after {stop.totals.records} records (the rest was not read)"
        if stop.mismatch is not None or not stop.totals.episodes:
            why = stop.mismatch or "no episode was replayed"
            typer.echo(f"{stopped.split(' (')[0]} of {name}; nothing kept: {why}", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if totals.records == 0:
        fail(f"{name}: the log holds no record")
    if totals.episodes == 0 and totals.malformed == totals.records:
        first = totals.findings.get("replay_records", [])[:1]
        shown = f" (first: {first[0][0]}: {first[0][1]})" if first else ""
        fail(f"{name}: every one of {totals.records} record(s) is malformed, nothing could be replayed{shown}")
    seconds = time.perf_counter() - started
    report = build_report(
        totals, loaded, " ".join(o.logs), ctx.renderer.token_texts, seconds, ctx.renderer.date.date().isoformat()
    )
    if weights_options is not None and stopped is None:
        try:
            _run_weights(report, o.logs, ctx, weights_options, o.log_format, fmap, bound, totals, err, o.quiet, fail)
        except KeyboardInterrupt:
            stopped = "interrupted during --weights (the log's checks are whole; the weights' did not run)"
    report.interrupted = stopped
    lines = gate.apply(report, o.fail_on)
    _write_report(report, fmt, o)
    for line in lines:
        typer.echo(line, err=True)
    if stopped is not None:
        kept = "reported above" if o.output is None or is_stdout(o.output) else f"kept in {o.output}"
        typer.echo(f"{stopped.split(' (')[0]} of {name}; what was replayed is {kept} (marked incomplete)", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(_exit_code(report, totals, name, o.fail_on))


WEIGHTS_ONLY = (
    ("device", "--device"),
    ("dtype", "--dtype"),
    ("max_episodes", "--max-episodes"),
    ("gradient", "--gradient/--no-gradient"),
    ("numeric_drift_threshold", "--numeric-drift-threshold"),
)


def _check_options(o: ReplayOptions, given: frozenset[str]) -> str:
    """The options checked before any work (contradictions included); the report format to write."""
    from tito_audit.cli.output import check_output, check_verbosity, report_format

    for name, flag in (("what_if", "--what-if"), ("drift", "--drift")):
        if o.only_tito and name in given and getattr(o, name):
            contradiction("--only-tito", flag, f"--only-tito runs no {flag[2:]} check")
    if o.engine != "ray":
        for name, flag in (("ray_address", "--ray-address"), ("ray_memory_mb", "--ray-memory")):
            if name in given:
                contradiction(f"--engine {o.engine}", flag, f"{flag} is for --engine ray")
    elif "workers" in given:
        contradiction("--engine ray", "--workers", "Ray places the work; --workers is for --engine local")
    if o.weights is None:
        for name, flag in WEIGHTS_ONLY:
            if name in given:
                fail(f"{flag} needs --weights (it sets how your policy is run)")
    check_verbosity(o.verbose, o.quiet)
    fmt = report_format(o.fmt, o.output)
    check_output(o.output)
    return fmt


def _replay_logs(o: ReplayOptions, ctx: Any, fmap: Any, bound: int, when: Any, err: Any) -> Any:
    """The logs' totals, here or on Ray, with a progress bar on a terminal."""
    from tito_audit.replay import replay_log

    def run(on_records: Any = None) -> Any:
        if o.engine == "ray":
            from tito_audit.replay.distributed import ContextSpec, replay_ray

            spec = ContextSpec(o.model, o.offline, ctx.whatif, ctx.drift, ctx.noncanonical, when)
            memory = o.ray_memory_mb * 2**20 if o.ray_memory_mb else None
            return replay_ray(
                o.logs, spec, ctx, fmt=o.log_format, field_map=fmap, max_record_bytes=bound, address=o.ray_address,
                memory=memory, on_records=on_records,
            )  # fmt: skip
        return replay_log(
            o.logs, ctx, fmt=o.log_format, field_map=fmap, workers=o.workers, on_records=on_records,
            max_record_bytes=bound,
        )  # fmt: skip

    if o.quiet or not err.is_terminal:
        return run()
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
        task = progress.add_task(Path(o.logs[0]).name, total=None)
        return run(lambda n: progress.advance(task, n))


def _write_report(report: Any, fmt: str, o: ReplayOptions) -> None:
    from tito_audit.cli.output import emit, output_console
    from tito_audit.formats import render_report

    if fmt == "terminal" and o.output is None:
        render_report(report, "terminal", console=output_console(), verbose=o.verbose, quiet=o.quiet)
    else:
        emit(render_report(report, fmt, verbose=o.verbose, quiet=o.quiet), o.output, announce=report.complete)


def _exit_code(report: Any, totals: Any, name: str, fail_on: str) -> int:
    """3 when records were malformed or episodes not checked (each said on stderr), else 1 on gating findings."""
    from tito_audit.gate import gating_findings

    checks = {c.id: c for c in report.models[0].checks}
    malformed = checks["replay_records"].active_findings
    incomplete = checks["replay_incomplete"].active_findings
    if totals.malformed:
        shown = ", ".join(f"{f.scenario}: {f.message}" for f in malformed[:3] if "gzip trailer" not in f.message)
        typer.echo(f"error: {name}: {totals.malformed} of {totals.records} record(s) malformed ({shown})", err=True)
    if totals.unchecked_tails:
        typer.echo(
            f"error: {name}: the log ends inside its last gzip trailer (a crash while writing?): its {totals.records} "
            "record(s) were read whole, but their checksum could not be checked",
            err=True,
        )
    if totals.reference_errors:
        shown = ", ".join(f.scenario for f in incomplete[:3])
        typer.echo(
            f"error: {name}: {totals.reference_errors} of {totals.episodes} episode(s) not checked ({shown}; see "
            "replay_incomplete for why)",
            err=True,
        )
    if malformed or incomplete:
        return EXIT_INCOMPLETE
    gating = [g for g in gating_findings(report, fail_on) if g[1].id not in ("replay_records", "replay_incomplete")]
    return EXIT_FINDINGS if gating else EXIT_OK


def _weights_options(
    weights: str | None,
    ref: str | None,
    sampling: str | None,
    device: str,
    dtype: str,
    max_episodes: int,
    gradient: bool,
    threshold: float,
    fail: Any,
) -> Any:
    """The --weights options, checked before the log is read (torch is not imported here)."""
    if weights is None:
        given = [name for name, v in (("--ref", ref), ("--sampling", sampling)) if v is not None]
        if given:
            fail(f"{', '.join(given)} need(s) --weights")
        return None
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        fail("--weights needs PyTorch: pip install 'tito-audit[rl]' (CPU torch first, see docs/rl.md)")
    for name, path in (("--weights", weights), ("--ref", ref)):
        problem = folder_problem(path, name)
        if problem is not None:
            fail(problem)
    if device not in ("auto", "cpu", "cuda") and not (device.startswith("cuda:") and device[5:].isdigit()):
        fail(f"--device must be auto, cpu, cuda or cuda:N (got {device!r})")
    from tito_audit.replay.weights.sampler import SamplingError, parse_sampling
    from tito_audit.replay.weights.session import WeightsOptions

    settings = None
    if sampling is not None:
        try:
            settings = parse_sampling(sampling)
        except SamplingError as exc:
            fail(f"--sampling: {exc}")
    return WeightsOptions(weights, ref, settings, device, dtype, max_episodes, gradient, threshold)


def _run_weights(
    report: Any,
    logs: list[str],
    ctx: Any,
    options: Any,
    log_format: str,
    fmap: Any,
    bound: int,
    log_totals: Any,
    err: Any,
    quiet: bool,
    fail: Any,
) -> None:
    """Run the weights over the (sampled) episodes and add their checks to the report."""
    from tito_audit.replay.weights.report import attach
    from tito_audit.replay.weights.session import run_weights

    episodes = log_totals.episodes
    total = min(episodes, options.max_episodes) if options.max_episodes else episodes

    def run(on_episode: Any = None) -> Any:
        return run_weights(
            logs, ctx, options, fmt=log_format, field_map=fmap, max_record_bytes=bound, log_episodes=episodes,
            log_diverged=log_totals.diverged_episodes, on_episode=on_episode,
        )  # fmt: skip

    try:
        if quiet or not err.is_terminal:
            result, setup = run()
        else:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            with Progress(
                TextColumn("running --weights"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
                TimeElapsedColumn(), console=err, transient=True,
            ) as progress:  # fmt: skip
                task = progress.add_task("weights", total=total)
                result, setup = run(lambda n: progress.advance(task, n))
    except AuditError as exc:
        fail(exc.one_line())
    attach(report, result, setup)
