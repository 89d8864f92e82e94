"""``tito-audit table MODEL...``: the Markdown compatibility table (one row per model, one column per check)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from tito_audit.cli.options import models_argument, offline_option
from tito_audit.cli.output import check_output, echo_model_errors, emit
from tito_audit.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_OPERATIONAL


def cached_models(cache_dir: str | Path | None = None) -> list[str]:
    """Every model repo in the Hugging Face cache (``HF_HUB_CACHE``), sorted: what ``--cached`` audits."""
    from huggingface_hub import constants, scan_cache_dir

    root = cache_dir or os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE
    if not Path(root).is_dir():
        return []
    info = scan_cache_dir(root)
    return sorted(r.repo_id for r in info.repos if r.repo_type == "model")


def register(app: typer.Typer) -> None:
    @app.command("table")
    def table_command(
        models: list[str] = models_argument(),
        bundled: bool = typer.Option(False, "--bundled", help="Add every model in templates_cache/."),
        cached: bool = typer.Option(False, "--cached", help="Add every model in the Hub cache (HF_HUB_CACHE)."),
        output: Path | None = typer.Option(None, "--output", "-o", help="Write the table here instead of stdout."),
        offline: bool = offline_option(),
    ) -> None:
        """Audit models and write a Markdown compatibility table with a note for every failure."""
        from tito_audit.audit.context import AuditOptions
        from tito_audit.audit.parallel import AuditInterrupted
        from tito_audit.cli.audit import kept_line, run_audit
        from tito_audit.formats.compatibility import compatibility_table
        from tito_audit.formats.labels import run_status
        from tito_audit.sources.bundled import bundled_names

        check_output(output)
        specs = list(models or []) + (bundled_names() if bundled else []) + (cached_models() if cached else [])
        if not specs:
            typer.echo("error: give at least one MODEL, --bundled or --cached", err=True)
            raise typer.Exit(EXIT_OPERATIONAL)
        try:
            report = run_audit(specs, AuditOptions(), offline, None, None, show_progress=True)
        except AuditInterrupted as stop:  # the finished models' rows, under a line that says the table is partial
            part = stop.report
            emit(f"**{run_status(part)}.**\n\n" + compatibility_table(part.models), output, announce=False)
            echo_model_errors(part.models)
            typer.echo(f"{stop}; {kept_line(output)}", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        emit(compatibility_table(report.models), output)
        echo_model_errors(report.models)
        raise typer.Exit(EXIT_OPERATIONAL if any(m.error for m in report.models) else EXIT_OK)
