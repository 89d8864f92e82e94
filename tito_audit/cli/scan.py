"""``tito-audit scan FOLDER... --tokenizer MODEL|auto``: audit every template of folders or files in parallel, with
limits."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tito_audit.cli.params import many_of, one_of
from tito_audit.errors import EXIT_FINDINGS, EXIT_OK, EXIT_OPERATIONAL, AuditError, UsageError

if TYPE_CHECKING:
    from tito_audit.scan import PoolLimits, ScanSummary, TemplateResult


def _classes() -> tuple[str, ...]:
    from tito_audit.report.scan_classes import CLASSES

    return CLASSES


def register(app: typer.Typer) -> None:
    app.command(
        "scan",
        help="Audit every .jinja template in folders or files against one tokenizer (or 'auto'). Exit 0; 1 when a "
        "template is in a --fail-on class; 2 when the scan could not run (a path, a tokenizer, an output file).",
    )(scan)


def scan(
    folders: Annotated[
        list[str],
        typer.Argument(
            metavar="FOLDER...",
            help="Folders of .jinja templates (searched recursively) or template files (pre-commit passes the "
            "changed ones).",
        ),
    ],
    tokenizer: Annotated[
        str, typer.Option("--tokenizer", "-t", help="Model spec whose tokenizer to use, or 'auto'.")
    ] = "auto",
    candidate: Annotated[
        list[str] | None,
        typer.Option("--candidate", "-c", help="With --tokenizer auto: a candidate (repeat; default: bundled)."),
    ] = None,
    workers: Annotated[int, typer.Option(help="Worker processes (0: in this process, no hard limits).")] = 2,
    render_timeout: Annotated[float, typer.Option(help="CPU seconds per render.")] = 2.0,
    deadline: Annotated[float, typer.Option(help="CPU seconds per template before its worker is killed.")] = 60.0,
    memory_mb: Annotated[int, typer.Option(help="Address space a worker may add, MiB.")] = 3072,
    limit: Annotated[int | None, typer.Option(help="Scan only the first N templates.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the JSON summary here.")] = None,
    markdown_out: Annotated[Path | None, typer.Option("--markdown", help="Write a Markdown summary here.")] = None,
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Write one self-contained page here: every template with its class, reasons, tokenizer and first "
            "divergent text; counts, a filter by class and a search by name and family.",
        ),
    ] = None,
    scenarios: Annotated[
        str,
        typer.Option(
            callback=one_of(("quick", "full")),
            help="'quick': one scenario per conversation shape plus the variants checks read (about half the "
            "time; can miss a break that only another content variant shows); 'full': every scenario, as "
            "`tito-audit audit` plays them (the verdict is the audit's).",
        ),
    ] = "quick",
    synthesize: Annotated[
        bool,
        typer.Option(
            help="With --tokenizer auto: a template whose control tokens no candidate has is audited on a tokenizer "
            "synthesized from them (an approximate verdict, counted apart) instead of ending as missing_tokens."
        ),
    ] = True,
    search: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Conversations the counterexample search draws per template (default 0: off, said per template; "
            "a scan triages, `tito-audit audit` searches 40 by default).",
        ),
    ] = None,
    search_seed: Annotated[int, typer.Option(help="Seed of the counterexample search.")] = 0,
    offline: Annotated[bool, typer.Option(help="Never touch the network.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar on stderr.")] = True,
    fail_on: Annotated[
        str,
        typer.Option(
            help="Exit 1 when any template is in these classes, comma-separated: verdicts (unsafe, tito-required, "
            "safe) or classes without one (always_raises, does_not_compile, ...; '' never).",
            callback=many_of(_classes),
        ),
    ] = "",
) -> None:
    from dataclasses import replace

    from tito_audit.cli.output import check_output, output_console, write_atomically
    from tito_audit.formats.scan_text import scan_markdown, scan_table
    from tito_audit.rendering.guard import AUDIT_LIMITS
    from tito_audit.scan import PoolLimits
    from tito_audit.scan.template_audit import SCAN_SEARCH

    check_output(json_out, "--json")
    check_output(markdown_out, "--markdown")
    check_output(html_out, "--html")
    try:
        if workers < 0 or render_timeout <= 0 or deadline <= 0 or memory_mb < 0 or (limit is not None and limit < 1):
            raise UsageError("scan", "--workers, --render-timeout, --deadline, --memory-mb, --limit must be positive")
        limits = PoolLimits(
            workers=workers,
            deadline_s=deadline,
            memory_bytes=memory_mb << 20,
            render=replace(AUDIT_LIMITS, seconds=render_timeout),
            scenarios=scenarios,
            synthesize=synthesize,
            search=SCAN_SEARCH if search is None else search,
            search_seed=search_seed,
        )
        summary = _run(folders, tokenizer, candidate or [], limits, offline, limit, progress and sys.stderr.isatty())
        if json_out is not None:
            write_atomically(json_out, summary.to_json())
        if markdown_out is not None:
            write_atomically(markdown_out, scan_markdown(summary))
        if html_out is not None:
            from tito_audit.formats.scan_page import to_html

            write_atomically(html_out, to_html(summary))
    except AuditError as exc:
        sys.stderr.write(f"error: {exc.one_line()}\n")
        raise typer.Exit(EXIT_OPERATIONAL) from None
    except OSError as exc:
        sys.stderr.write(f"error: {exc}".replace("\n", " ") + "\n")
        raise typer.Exit(EXIT_OPERATIONAL) from None
    output_console().print(scan_table(summary))
    failing = {c.strip() for c in fail_on.split(",") if c.strip()}
    hit = [r for r in summary.results if r.cls in failing]
    for r in hit:  # which templates fail the gate, and why, in the log (the table names only a few)
        sys.stderr.write(f"{r.name}: {r.cls}: {failing_reason(r)}\n")
    raise typer.Exit(EXIT_FINDINGS if hit else EXIT_OK)


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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from tito_audit.scan import scan_directory

    if not bar:
        return scan_directory(folders, tokenizer, candidates, limits, offline, limit)
    with Progress(TextColumn("scan"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True) as prog:
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
