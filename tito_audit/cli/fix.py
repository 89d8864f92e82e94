"""``tito-audit fix MODEL``: a patched chat template for the failures the audit found, proven before it is offered."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from tito_audit.cli.options import (
    debug_option,
    offline_option,
    search_option,
    search_seed_option,
    template_kwarg_option,
    template_name_option,
)
from tito_audit.cli.output import check_output, is_stdout, write_atomically
from tito_audit.cli.params import one_of
from tito_audit.errors import EXIT_INTERRUPTED, EXIT_OPERATIONAL, AuditError

_STATUS_LINE = {
    "proven": ("bold green", "patch proven"),
    "changes_inference": ("bold yellow", "patch changes deployed prompts"),
    "nothing_to_fix": ("bold green", "nothing to fix"),
    "no_safe_patch": ("bold red", "no safe patch"),
}


def _print_patches(console: Console, result: Any) -> None:
    """The patches in the template, those their proof rejected, and the classes that do not apply."""
    if result.offered:
        console.print(Text(f"\nPatches in the template ({len(result.offered)}):", style="bold"))
        for p in result.offered:
            tag = "required" if p.required else "optional"
            head = Text(f"  [{tag}] ", style="bold red" if p.required else "cyan")
            head.append(f"{p.id}: {p.title}")
            if p.changes_inference:
                head.append("  (changes inference renders)", style="bold yellow")
            console.print(head)
            console.print(Text(f"      answers {p.why}", style="dim"))
            for change in p.changes:
                console.print(Text(f"      {change}"))
            for caveat in p.caveats:
                console.print(Text(f"      note: {caveat}", style="yellow"))
    if result.rejected:
        console.print(Text("\nRejected by their proof:", style="bold"))
        for r in result.rejected:
            console.print(Text(f"  {r.patch.id}: " + "; ".join(r.reasons[:3]), style="red"))
    if result.skipped:
        console.print(Text("\nNot applicable:", style="bold"))
        for s in result.skipped:
            console.print(Text(f"  {s.id}: {s.reason}", style="dim"))


def _print_proof(console: Console, proof: Any) -> None:
    """Each check whose status moved, then the proof: no regression, inference renders, assistant masks."""
    from tito_audit.formats.terminal import STATUS_STYLE

    console.print(Text("\nPer-check status (original -> patched):", style="bold"))
    for c in proof.checks:
        if c.before == c.after and c.findings_before == c.findings_after:
            continue
        row = Text(f"  {c.id:<24} ")
        row.append(c.before, STATUS_STYLE.get(c.before, ""))
        row.append(" -> ")
        row.append(c.after, STATUS_STYLE.get(c.after, ""))
        row.append(f"  ({c.findings_before} -> {c.findings_after} findings)", style="dim")
        console.print(row)
    unchanged = [c.id for c in proof.checks if c.before == c.after and c.findings_before == c.findings_after]
    if unchanged:
        console.print(Text(f"  unchanged: {', '.join(unchanged)}", style="dim"))
    console.print(Text("\nProof:", style="bold"))
    regressed = [c.id for c in proof.checks if c.regressed]
    console.print(f"  audit: {'no check regressed' if not regressed else 'REGRESSED ' + ', '.join(regressed)}")
    same = proof.equivalence
    console.print(
        f"  inference equivalence: {same.identical} of {same.compared} conversations render identical token ids "
        f"(prompts with no earlier assistant turn, with and without tools, and the first generated turn, "
        f"in every thinking mode); {same.later_identical} of {same.later_compared} later generated turns identical"
        + (f"; {same.newly_rendering} conversation(s) that raised before now render" if same.newly_rendering else "")
    )
    for d in (same.differences + same.later_differences)[:5]:
        console.print(Text(f"    differs: {d.conversation}: {d.expected!r} -> {d.actual!r}", style="yellow"))
    console.print(
        f"  deployed prompts before later assistant turns (earlier turns present): {same.prompts_identical} of "
        f"{same.prompts_compared} render identical token ids"
    )
    for change in proof.changes:
        console.print(Text(f"  CHANGES: {change}", style="bold yellow"))
    for d in same.prompt_differences[:3]:
        console.print(Text(f"    differs: {d.conversation}: {d.expected!r} -> {d.actual!r}", style="yellow"))
    if proof.masks is not None:
        masks = proof.masks
        modes = ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in masks.by_mode.items())
        console.print(
            f"  assistant masks (return_assistant_tokens_mask) equal the sampled spans, stop token included: "
            f"{masks.exact} of {masks.episodes} episodes ({modes}; {masks.not_comparable} not comparable)"
        )
    for flag in proof.flagged:
        console.print(Text(f"  FLAGGED: {flag}", style="bold yellow"))
    for note in proof.notes:
        console.print(Text(f"  note: {note}", style="yellow"))
    for reason in proof.reasons:
        console.print(Text(f"  not proven: {reason}", style="red"))


def _print_terminal(console: Console, result: object, output: Path | None) -> None:
    from tito_audit.fix import FixResult
    from tito_audit.formats.labels import versions_text
    from tito_audit.formats.terminal import VERDICT_STYLE

    assert isinstance(result, FixResult)
    console.print(Text(versions_text(result.libraries), style="dim"), soft_wrap=True)
    before = result.before.verdict
    after = result.after.verdict if result.after else None
    style, label = _STATUS_LINE[result.status]
    line = Text(f"{result.model}  ")
    line.append(before.upper(), VERDICT_STYLE.get(before, ""))
    if after:
        line.append(" -> ")
        line.append(after.upper(), VERDICT_STYLE.get(after, ""))
    line.append("  ")
    line.append(label, style)
    if result.status == "changes_inference" and result.proof is not None:
        line.append(f" ({'; '.join(result.proof.changes)})", style)
    console.print(line)
    console.print(Text(result.message, style="dim"))
    _print_patches(console, result)
    if result.proof is not None:
        _print_proof(console, result.proof)
    diff = result.diff()
    if diff:
        console.print(Text("\nDiff:", style="bold"))
        for diff_line in diff.splitlines():
            style = (
                "green"
                if diff_line.startswith("+")
                else "red"
                if diff_line.startswith("-")
                else "cyan"
                if diff_line.startswith("@")
                else ""
            )
            console.print(Text(diff_line, style=style), soft_wrap=True)
    if is_stdout(output):
        return  # the patched template is on stdout
    if output is not None and result.patched is not None:
        console.print(Text(f"\nWrote {output}. Audit it with:", style="bold"))
        console.print(Text(f"  tito-audit audit {result.model} --chat-template {output}"))
    elif result.patched is not None:
        console.print(Text("\nWrite the patched template with --output FILE.jinja", style="dim"))


def register(app: typer.Typer) -> None:
    @app.command("fix")
    def fix_command(
        model: str = typer.Argument(..., help=r"Hub repo id (org/name\[@revision]), local folder or bundled name."),
        output: Path | None = typer.Option(None, "--output", "-o", help="Write the patched template (.jinja) here."),
        template_name: str | None = template_name_option(),
        chat_template: Path | None = typer.Option(
            None, "--chat-template", help="Fix this template file (with MODEL's tokenizer) instead."
        ),
        template_kwarg: list[str] = template_kwarg_option(),
        search: int | None = search_option(),
        search_seed: int = search_seed_option(),
        fmt: str = typer.Option(
            "terminal", "--format", "-f", help="terminal | json", callback=one_of(("terminal", "json"))
        ),
        offline: bool = offline_option(),
        debug: bool = debug_option(),
    ) -> None:
        """Patch the chat template for the failures found, prove the patch, and print the diff."""
        from tito_audit.audit.context import SEARCH_BUDGET, AuditOptions
        from tito_audit.cli.params import parse_kwargs
        from tito_audit.fix import propose_fix
        from tito_audit.sources.load import load

        check_output(output)
        to_stdout = is_stdout(output)  # the patched template on stdout: the report goes to stderr
        if to_stdout and fmt == "json":
            typer.echo("error: -o - and --format json both write to standard output: give -o FILE", err=True)
            raise typer.Exit(EXIT_OPERATIONAL)
        err = Console(stderr=True)
        show = fmt == "terminal" and err.is_terminal
        doing = ["loading"]
        try:
            options = AuditOptions(
                template_kwargs=parse_kwargs(template_kwarg),
                debug=debug,
                search=SEARCH_BUDGET if search is None else search,
                search_seed=search_seed,
            )
            loaded = load(model, offline=offline, template_name=template_name, chat_template_file=chat_template)
            with err.status("auditing", spinner="dots") if show else contextlib.nullcontext() as status:

                def stage(text: str) -> None:
                    doing[0] = text
                    if status is not None:
                        status.update(text)

                doing[0] = "auditing"
                result = propose_fix(loaded, options, on_stage=stage)
        except KeyboardInterrupt:  # a patch is offered only once proven: nothing half-proven is written
            typer.echo(f"interrupted while fixing {model} ({doing[0]}): no patch is proven, nothing written", err=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except AuditError as exc:
            typer.echo(f"error: {exc.one_line()}", err=True)
            raise typer.Exit(EXIT_OPERATIONAL) from None
        except typer.BadParameter as exc:
            typer.echo(f"error: {model}: {exc}", err=True)
            raise typer.Exit(EXIT_OPERATIONAL) from None
        except Exception as exc:
            if debug:
                raise
            typer.echo(f"error: {model}: internal error: {type(exc).__name__}: {exc}", err=True)
            raise typer.Exit(EXIT_OPERATIONAL) from None
        if output is not None and result.patched is not None:
            try:
                write_atomically(output, result.patched)
            except OSError as exc:
                typer.echo(f"error: {model}: cannot write --output {output}: {exc}", err=True)
                raise typer.Exit(EXIT_OPERATIONAL) from None
        if fmt == "json":
            sys.stdout.write(json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n")
        else:
            _print_terminal(Console(soft_wrap=True, stderr=to_stdout), result, output)
        raise typer.Exit(result.exit_code)
