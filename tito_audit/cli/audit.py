"""``tito-audit audit MODEL...``: audit models and gate on the findings."""

# ruff: noqa: RUF009  (the options dataclass's defaults are typer declarations: see AuditCommandOptions)
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console  # typer's own help and errors import rich.console anyway
from rich.markup import escape

from tito_audit.cli.options import (
    command,
    debug_option,
    models_argument,
    offline_option,
    search_option,
    search_seed_option,
    template_kwarg_option,
    template_name_option,
    thinking_option,
)
from tito_audit.cli.output import (
    check_output,
    check_verbosity,
    echo_model_errors,
    emit,
    is_stdout,
    output_console,
    report_format,
)
from tito_audit.cli.params import (
    FORMAT_NAMES,
    MAX_COUNT,
    MAX_WORKERS,
    check_date,
    fail,
    number,
    one_of,
    parse_date,
    parse_kwargs,
)
from tito_audit.engines import RENDERERS  # the renderer adapters register themselves (light: --help lists them)
from tito_audit.errors import (
    EXIT_FINDINGS,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OPERATIONAL,
    AuditError,
)
from tito_audit.rendering.clock import DEFAULT_DATE

if TYPE_CHECKING:  # the library is imported when a command runs, not for --help
    from tito_audit.audit.context import AuditOptions
    from tito_audit.report.model_report import AuditReport

FAIL_ON = ("warn", "error")


def audit(*args: Any, **kwargs: Any) -> AuditReport:
    """``tito_audit.audit.parallel.audit_models``, imported when a command runs rather than for ``--help``; this
    process ends with the command, so what each load leaves alive is frozen out of the garbage collector's passes."""
    from tito_audit.audit.parallel import audit_models
    from tito_audit.sources.tokenizer import freeze_after_loads

    freeze_after_loads()
    return audit_models(*args, **kwargs)


def unreachable_coverage(report: AuditReport, min_coverage: int) -> list[str]:
    """One line per model whose whole catalogue is smaller than ``--min-coverage``: no template could pass it, so
    it is a usage error (exit 2), not an incomplete audit."""
    return [
        f"error: {m.model}: --min-coverage {min_coverage} is unreachable: its catalogue has "
        f"{m.scenarios['catalogue']} scenarios"
        for m in report.models
        if not m.error and int(m.scenarios.get("catalogue", min_coverage)) < min_coverage
    ]


def incomplete(
    report: AuditReport, allow_check_errors: bool = False, min_coverage: int = 0, allow_not_probed: bool = False
) -> list[str]:
    """One line per thing the audit could not check: a check in ``error`` status (unless allowed), a verdict that
    is ``error`` (a check the verdict needs did not decide: never a pass, ``--allow-check-errors`` included), a
    model that played fewer than ``min_coverage`` scenarios (of a catalogue that has that many), a ``safe`` verdict
    that names what it did not probe (``not_probed:*``: a template arm no conversation took, a switch, a search cut
    short; unless ``allow_not_probed``): SAFE claims every conversation, so one with a gap is never a clean pass."""
    from tito_audit.report.verdict import describe_reason

    lines = []
    for m in report.models:
        if m.error:
            continue
        if not allow_check_errors:
            lines += [f"{m.model}: check {c.id} could not run: {c.summary}" for c in m.checks if c.status == "error"]
        if m.verdict == "error":
            undecided = [describe_reason(r) for r in m.verdict_reasons if r.startswith("error:")]
            lines.append(f"{m.model}: verdict undecided ({'; '.join(undecided) or 'no reason recorded'})")
        gaps = [describe_reason(r) for r in m.verdict_reasons if r.startswith("not_probed:")]
        if m.verdict == "safe" and gaps and not allow_not_probed:
            lines.append(f"{m.model}: SAFE does not cover what was not probed ({'; '.join(gaps)})")
        played = int(m.scenarios.get("played", 0))
        if played < min_coverage <= int(m.scenarios.get("catalogue", min_coverage)):
            lines.append(
                f"{m.model}: {played} of {m.scenarios.get('catalogue', '?')} scenarios played, "
                f"fewer than --min-coverage {min_coverage}"
            )
    return lines


def exit_code(
    report: AuditReport,
    fail_on: str,
    allow_check_errors: bool = False,
    min_coverage: int = 0,
    allow_not_probed: bool = False,
) -> int:
    """2 if any model could not be audited; 3 if a check errored (unless ``allow_check_errors``), a model
    played fewer than ``min_coverage`` scenarios, or a SAFE names what it did not probe (unless
    ``allow_not_probed``: under either ``fail_on``, since it is no finding); 1 if unsuppressed findings outside the
    baseline reach ``fail_on``; else 0."""
    from tito_audit.gate import gating_findings

    if any(m.error for m in report.models) or unreachable_coverage(report, min_coverage):
        return EXIT_OPERATIONAL
    if incomplete(report, allow_check_errors, min_coverage, allow_not_probed):
        return EXIT_INCOMPLETE
    return EXIT_FINDINGS if gating_findings(report, fail_on) else EXIT_OK


def run_audit(
    models: list[str],
    options: AuditOptions,
    offline: bool,
    template_name: str | None,
    chat_template: Path | None,
    show_progress: bool,
    jobs: int | None = None,
) -> AuditReport:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if not show_progress or not err.is_terminal:
        return audit(models, options, offline, template_name, str(chat_template) if chat_template else None, jobs=jobs)
    # auto_refresh=False: no refresh thread may be running when --jobs forks the worker processes
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        auto_refresh=False,
    ) as progress:
        task = progress.add_task("auditing", total=len(models))
        progress.refresh()

        def on_model(spec: str, stage: str) -> None:
            if stage == "done":
                progress.advance(task)
            else:
                progress.update(task, description=f"{stage} {spec}")
            progress.refresh()

        return audit(
            models,
            options,
            offline,
            template_name,
            str(chat_template) if chat_template else None,
            on_model=on_model,
            jobs=jobs,
        )


@dataclass(frozen=True)
class AuditCommandOptions:
    """``tito-audit audit``'s parameters, in help order (``options.command`` makes them the typer signature). The
    defaults are typer's declarations, read once for the signature; typer always passes every value."""

    models: list[str] = models_argument()
    bundled: bool = typer.Option(False, "--bundled", help="Audit every model in templates_cache/.")
    fmt: str | None = typer.Option(
        None,
        "--format",
        "-f",
        help=" | ".join(FORMAT_NAMES) + " (default: the one --output's suffix names, else terminal)",
        callback=one_of(FORMAT_NAMES),
    )
    output: Path | None = typer.Option(
        None,
        "--output",
        "-o",
        help="Write the report here instead of stdout (says 'wrote FILE' on stderr; checked before any work, "
        "written atomically; .json .md .html .sarif choose the format).",
    )
    rl_dir: Path | None = typer.Option(
        None, "--rl-dir", help="With --format html: embed the plots and metrics of `tito-audit rl --out DIR`."
    )
    fail_on: str = typer.Option(
        "error", "--fail-on", help="Exit 1 on findings at or above: warn | error.", callback=one_of(FAIL_ON)
    )
    allow_check_errors: bool = typer.Option(
        False, "--allow-check-errors", help="Do not exit 3 when a check could not run (status error)."
    )
    allow_not_probed: bool = typer.Option(
        False, "--allow-not-probed", help="Do not exit 3 when a SAFE names what it did not probe (not_probed)."
    )
    min_coverage: int = typer.Option(
        0, "--min-coverage", help="Exit 3 when a model plays fewer than N scenarios.", callback=number(0, MAX_COUNT)
    )
    suppressions: Path | None = typer.Option(
        None,
        "--suppressions",
        help=r"TOML of \[\[suppress]] entries (default: ./tito-audit.toml, "
        r"else ./pyproject.toml \[tool.tito-audit]).",
    )
    baseline: Path | None = typer.Option(
        None, "--baseline", help="A previous --format json report: exit 1 only on findings new relative to it."
    )
    offline: bool = offline_option()
    template_name: str | None = template_name_option()
    chat_template: Path | None = typer.Option(None, "--chat-template", help="Audit this template file instead.")
    date: str = typer.Option(
        DEFAULT_DATE.date().isoformat(), "--date", help="Date templates see (YYYY-MM-DD).", callback=check_date
    )
    template_kwarg: list[str] = template_kwarg_option()
    thinking: str = thinking_option()
    search: int | None = search_option()
    search_seed: int = search_seed_option()
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every finding with its token strip.")
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the verdict lines.")
    debug: bool = debug_option()
    jobs: int | None = typer.Option(
        None,
        "--jobs",
        "-j",
        help="Models audited in parallel (default: one per model, one per core).",
        callback=number(1, MAX_WORKERS),
    )
    renderer: str | None = typer.Option(
        None,
        "--renderer",
        help=f"Render with this instead of the chat template (docs/renderers.md): {escape(RENDERERS.choices())}.",
    )
    train_renderer: str | None = typer.Option(
        None,
        "--train-renderer",
        help="Also re-render every scenario with this trainer renderer (same names; jinja: the chat template) "
        "and report where it departs from the engine's context.",
    )


def register(app: typer.Typer) -> None:
    app.command("audit")(command(AuditCommandOptions, audit_command))


def audit_command(o: AuditCommandOptions, given: frozenset[str]) -> None:
    """Audit chat templates for Token-In, Token-Out safety."""
    from tito_audit.audit.parallel import AuditInterrupted

    check_verbosity(o.verbose, o.quiet)
    fmt = report_format(o.fmt, o.output)
    check_output(o.output)
    specs = _specs(o)
    when = dt.datetime.combine(parse_date(o.date), DEFAULT_DATE.time())
    rl = _rl_artifacts(o, fmt)
    options, gate = _audit_options(o, when)
    try:
        report = run_audit(
            specs, options, o.offline, o.template_name, o.chat_template, show_progress=not o.quiet, jobs=o.jobs
        )
    except AuditInterrupted as stop:  # what finished is reported (marked incomplete), then exit 130
        report = stop.report
    if rl is not None and o.rl_dir is not None:  # another model's RL run is refused
        from tito_audit.report.rl_artifacts import check_same_template

        try:
            # a model rendered by --renderer has no template hash: an RL run of its template is not of it
            shas = [m.provenance.template_sha256 for m in report.models if m.provenance]
            check_same_template(rl, o.rl_dir, [sha for sha in shas if sha])
        except ValueError as exc:
            fail(str(exc))
    gate_lines = gate.apply(report, o.fail_on)
    on_screen = _write_report(report, fmt, when, rl, o)
    if not on_screen or o.debug:
        echo_model_errors(report.models, o.debug)
    for line in gate_lines + incomplete(report, o.allow_check_errors, o.min_coverage, o.allow_not_probed):
        typer.echo(line, err=True)
    for line in unreachable_coverage(report, o.min_coverage):
        typer.echo(line, err=True)
    if not report.complete:
        done = f"interrupted after {len(report.models)} of {report.requested} models"
        typer.echo(f"{done}; {kept_line(o.output)}", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(exit_code(report, o.fail_on, o.allow_check_errors, o.min_coverage, o.allow_not_probed))


def _specs(o: AuditCommandOptions) -> list[str]:
    from tito_audit.sources.bundled import bundled_names

    specs = list(o.models or []) + (bundled_names() if o.bundled else [])
    if not specs:
        fail("give at least one MODEL or --bundled")
    return specs


def _rl_artifacts(o: AuditCommandOptions, fmt: str) -> Any:
    """The ``--rl-dir`` artifacts, checked before any model is audited (None without it)."""
    if o.rl_dir is None:
        return None
    from tito_audit.report.rl_artifacts import read_rl_dir

    try:
        if fmt != "html":
            raise ValueError(f"--rl-dir needs --format html (got --format {fmt})")
        return read_rl_dir(o.rl_dir)
    except ValueError as exc:
        fail(str(exc))


def _audit_options(o: AuditCommandOptions, when: dt.datetime) -> tuple[AuditOptions, Any]:
    """The audit's options and the gate, checked before any model is audited."""
    from tito_audit.audit.context import AuditOptions
    from tito_audit.audit.search import DEFAULT_BUDGET
    from tito_audit.engines.resolve import check_name
    from tito_audit.gate import Gate

    for flag, name in (("--renderer", o.renderer), ("--train-renderer", o.train_renderer)):
        why = None if name is None else check_name(name)
        if why is not None:
            fail(f"{flag}: {why}")
    options = AuditOptions(
        date=when,
        template_kwargs=parse_kwargs(o.template_kwarg),
        thinking=o.thinking,
        debug=o.debug,
        renderer=o.renderer,
        train_renderer=o.train_renderer,
        search=DEFAULT_BUDGET if o.search is None else o.search,
        search_seed=o.search_seed,
    )
    try:
        gate = Gate.load(o.suppressions, o.baseline)  # bad config fails before any model is audited
    except AuditError as exc:
        fail(exc.one_line())
    return options, gate


def _write_report(report: AuditReport, fmt: str, when: dt.datetime, rl: Any, o: AuditCommandOptions) -> bool:
    """The report on stdout or in ``--output``; True when the terminal report went to the same terminal as stderr
    (it already shows the errors)."""
    from tito_audit.formats import render_report

    if fmt == "terminal" and o.output is None:
        console = output_console()
        if not o.quiet:
            console.print(f"[dim]templates see the date {when:%Y-%m-%d} (--date to change)[/dim]")
        render_report(report, "terminal", console=console, verbose=o.verbose, quiet=o.quiet)
        return console.is_terminal and Console(stderr=True).is_terminal
    emit(render_report(report, fmt, verbose=o.verbose, quiet=o.quiet, rl=rl), o.output, announce=report.complete)
    if o.output is not None and not is_stdout(o.output):  # the report is in a file: its verdicts, as -q shows them
        render_report(report, "terminal", console=output_console(), quiet=True)
    return False


def kept_line(output: Path | None) -> str:
    """Where an interrupted run's finished models went."""
    if output is None or is_stdout(output):
        return "the finished ones are reported above (marked incomplete)"
    return f"the finished ones are kept in {output} (marked incomplete)"
