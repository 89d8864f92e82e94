"""``tito-audit scan FOLDER... --tokenizer MODEL|auto``: audit every template of folders or files in parallel, with
limits."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tito_audit.cli.options import command
from tito_audit.cli.params import MAX_COUNT, MAX_MEMORY_MB, MAX_SECONDS, MAX_WORKERS, fail, many_of, number, one_of
from tito_audit.errors import (
    EXIT_FINDINGS,
    EXIT_INCOMPLETE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    AuditError,
)

if TYPE_CHECKING:
    from tito_audit.scan import PoolLimits, ScanSummary, TemplateResult


def _classes() -> tuple[str, ...]:
    from tito_audit.report.scan_classes import CLASSES

    return CLASSES


def register(app: typer.Typer) -> None:
    app.command(
        "scan",
        help="Audit every .jinja template in folders or files against one tokenizer (or 'auto'). Exit 0; 1 when a "
        "template is in a --fail-on class; 2 when the scan could not run (a path, a tokenizer, an output file); 3 "
        "when tito-audit itself failed on a template (worker_crash, audit_error); 130 when interrupted.",
    )(command(ScanOptions, scan))


@dataclass(frozen=True)
class ScanOptions:
    """``tito-audit scan``'s parameters, in help order (``options.command`` makes them the typer signature)."""

    folders: Annotated[
        list[str],
        typer.Argument(
            metavar="FOLDER...",
            help="Folders of .jinja templates (searched recursively) or template files (pre-commit passes the "
            "changed ones).",
        ),
    ]
    tokenizer: Annotated[
        str, typer.Option("--tokenizer", "-t", help="Model spec whose tokenizer to use, or 'auto'.")
    ] = "auto"
    candidate: Annotated[
        list[str] | None,
        typer.Option("--candidate", "-c", help="With --tokenizer auto: a candidate (repeat; default: bundled)."),
    ] = None
    workers: Annotated[
        int,
        typer.Option(help="Worker processes (0: in this process, no hard limits).", callback=number(0, MAX_WORKERS)),
    ] = 2
    render_timeout: Annotated[
        float, typer.Option(help="CPU seconds per render.", callback=number(0, MAX_SECONDS, above=True))
    ] = 2.0
    deadline: Annotated[
        float,
        typer.Option(
            help="CPU seconds per template before its worker is killed.", callback=number(0, MAX_SECONDS, above=True)
        ),
    ] = 60.0
    memory_mb: Annotated[
        int,
        typer.Option(
            help="Address space a worker may add, MiB.", callback=number(0, MAX_MEMORY_MB, note=" (0: no cap)")
        ),
    ] = 3072
    limit: Annotated[
        int | None, typer.Option(help="Scan only the first N templates.", callback=number(1, MAX_COUNT))
    ] = None
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the JSON summary here.")] = None
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary here.")] = None
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write one self-contained page here: every template with its class, reasons, tokenizer and first "
            "divergent text; counts, a filter by class and a search by name and family.",
        ),
    ] = None
    scenarios: Annotated[
        str,
        typer.Option(
            callback=one_of(("quick", "full")),
            help="'quick': one scenario per conversation shape plus the variants checks read (about half the "
            "time; can miss a break that only another content variant shows); 'full': every scenario, as "
            "`tito-audit audit` plays them (the verdict is the audit's).",
        ),
    ] = "quick"
    synthesize: Annotated[
        bool,
        typer.Option(
            help="With --tokenizer auto: a template whose control tokens no candidate has is audited on a tokenizer "
            "synthesized from them (an approximate verdict, counted apart) instead of ending as missing_tokens."
        ),
    ] = True
    search: Annotated[
        int | None,
        typer.Option(
            help="Conversations the counterexample search draws per template (default 0: off, said per template; "
            "a scan triages, `tito-audit audit` searches 40 by default).",
            callback=number(0, MAX_COUNT),
        ),
    ] = None
    search_seed: Annotated[int, typer.Option(help="Seed of the counterexample search.")] = 0
    offline: Annotated[bool, typer.Option(help="Never touch the network.")] = False
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True
    fail_on: Annotated[
        str,
        typer.Option(
            help="Exit 1 when any template is in these classes, comma-separated: verdicts (unsafe, tito-required, "
            "safe) or classes without one (always_raises, does_not_compile, ...; '' never).",
            callback=many_of(_classes),
        ),
    ] = ""


OUTPUTS = (("json_out", "--json"), ("markdown_out", "--markdown"), ("html_out", "--html"))


def _check_options(o: ScanOptions, given: frozenset[str]) -> None:
    """Before any work: the output files, and options that contradict each other (one line, exit 2)."""
    from tito_audit.cli.output import check_output, is_stdout
    from tito_audit.scan import AUTO

    for name, flag in OUTPUTS:
        check_output(getattr(o, name), flag)
    to_stdout = [flag for name, flag in OUTPUTS if is_stdout(getattr(o, name))]
    if len(to_stdout) > 1:
        fail(f"{' and '.join(to_stdout)} all name - (standard output): only one can, give the others files")
    if o.tokenizer != AUTO:
        for name, flag in (("candidate", "--candidate"), ("synthesize", "--synthesize/--no-synthesize")):
            if name in given:
                fail(f"{flag} is for --tokenizer auto; --tokenizer {o.tokenizer} audits every template on it")
    if o.workers == 0:
        unenforced = [
            flag for name, flag in (("deadline", "--deadline"), ("memory_mb", "--memory-mb")) if name in given
        ]
        if unenforced:
            fail(
                f"--workers 0 audits in this process, where {' and '.join(unenforced)} cannot be enforced: give "
                "--workers 1 or more"
            )


def scan(o: ScanOptions, given: frozenset[str]) -> None:
    from dataclasses import replace

    from tito_audit.cli.output import is_stdout, output_console
    from tito_audit.formats.scan_text import scan_table
    from tito_audit.rendering.guard import AUDIT_LIMITS
    from tito_audit.scan import PoolLimits, ScanInterrupted
    from tito_audit.scan.template_audit import SCAN_SEARCH

    _check_options(o, given)
    limits = PoolLimits(
        workers=o.workers,
        deadline_s=o.deadline,
        memory_bytes=o.memory_mb << 20,
        render=replace(AUDIT_LIMITS, seconds=o.render_timeout),
        scenarios=o.scenarios,
        synthesize=o.synthesize,
        search=SCAN_SEARCH if o.search is None else o.search,
        search_seed=o.search_seed,
    )
    table_to_stderr = any(is_stdout(getattr(o, name)) for name, _ in OUTPUTS)  # stdout holds a summary file
    try:
        bar = o.progress and sys.stderr.isatty()
        summary = _run(o.folders, o.tokenizer, o.candidate or [], limits, o.offline, o.limit, bar)
    except AuditError as exc:
        fail(exc.one_line())
    except ScanInterrupted as stop:  # the templates that finished are written, marked incomplete
        kept = _write(o, stop.summary)
        output_console(stderr=table_to_stderr).print(scan_table(stop.summary))
        said = f"; kept in {', '.join(kept)} (marked incomplete)" if kept else ""
        typer.echo(f"{stop.summary.status.replace('INCOMPLETE: ', '')}{said}", err=True)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    _write(o, summary)
    output_console(stderr=table_to_stderr).print(scan_table(summary))
    raise typer.Exit(_exit_code(summary, o.fail_on))


def _write(o: ScanOptions, summary: ScanSummary) -> list[str]:
    """The summary files asked for (``-``: standard output); the names of those written."""
    from tito_audit.cli.output import write_atomically
    from tito_audit.formats.scan_text import scan_markdown

    written = []
    for name, flag in OUTPUTS:
        path = getattr(o, name)
        if path is None:
            continue
        if name == "json_out":
            text = summary.to_json()
        elif name == "markdown_out":
            text = scan_markdown(summary)
        else:
            from tito_audit.formats.scan_page import to_html

            text = to_html(summary)
        try:
            write_atomically(path, text)
        except OSError as exc:
            fail(f"cannot write {flag} {path}: {exc.strerror or exc}")
        written.append("standard output" if str(path) == "-" else str(path))
    return written


def _exit_code(summary: ScanSummary, fail_on: str) -> int:
    """3 when tito-audit itself failed on a template (each named on stderr with its cause: never a template's
    class that passes for a finding about it); else 1 when a template is in a --fail-on class (each named)."""
    from tito_audit.report import scan_classes as classify

    ours = [r for r in summary.results if r.cls in (classify.WORKER_CRASH, classify.AUDIT_ERROR) or not r.cls]
    for r in ours:
        typer.echo(
            f"error: {r.name}: tito-audit failed on this template ({r.cls or 'no class'}: {r.reason or r.error_kind}); "
            "not a finding about the template",
            err=True,
        )
    failing = {c.strip() for c in fail_on.split(",") if c.strip()}
    hit = [r for r in summary.results if r.cls in failing]
    for r in hit:  # which templates fail the gate, and why, in the log (the table names only a few)
        sys.stderr.write(f"{r.name}: {r.cls}: {failing_reason(r)}\n")
    if ours:
        return EXIT_INCOMPLETE
    return EXIT_FINDINGS if hit else EXIT_OK


def failing_reason(r: TemplateResult) -> str:
    """One line: the verdict's reasons and first divergent text, or why there is no verdict."""
    from tito_audit.report.verdict import describe_reason

    if r.verdict is None:
        return r.reason or r.cls
    said = "; ".join(describe_reason(x) for x in r.verdict_reasons)
    return f"{said}{' (approximate verdict)' if r.approximate else ''}" + (
        f"; {r.first_divergence}" if r.first_divergence else ""
    )


def _run(
    folders: list[str],
    tokenizer: str,
    candidates: list[str],
    limits: PoolLimits,
    offline: bool,
    limit: int | None,
    bar: bool,
) -> ScanSummary:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from tito_audit.scan import scan_directory

    if not bar:
        return scan_directory(folders, tokenizer, candidates, limits, offline, limit)
    columns = (TextColumn("scan"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("scan", total=None)
        return scan_directory(
            folders,
            tokenizer,
            candidates,
            limits,
            offline,
            limit,
            on_result=lambda r: prog.advance(task),
            on_planned=lambda n: prog.update(task, total=n),
        )
