"""``tito-audit fix``: rewrite a chat template for the failure classes the audit found, and prove the rewrite.

Each patch class (one module each) reads the audit of the original template and the template's own structure
(``source.Source``: Jinja's lexer with exact spans), never a model name, so forks and fine-tunes of a family are
patched the same way. Patches are applied in a fixed order and proven together (``proof``): the audit again
with the patched template, no check worse than before, every targeted check better, inference renders
unchanged, and assistant masks equal to the sampled spans in every thinking mode when markers were placed. When
the combination does not hold, each patch is proven alone and only the proven ones are combined. A patch that
holds but changes a deployed prompt (the prompt before a later assistant turn) is offered as
``changes_inference``, never as proven, with what it changes.

    from tito_audit import load
    from tito_audit.fix import propose_fix
    result = propose_fix(load("Qwen/Qwen3-0.6B"))
    result.status, result.patched, result.diff()
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tito_audit.errors import AuditError
from tito_audit.fix import arguments, empty_content, markers, reasoning
from tito_audit.fix.patch import AuditedTemplate, Patch, Skip
from tito_audit.fix.proof import Proof, prove
from tito_audit.rendering.template_source import PatchError, Source

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditOptions
    from tito_audit.report.model_report import ModelReport
    from tito_audit.sources.load import LoadedModel

__all__ = ["FixError", "FixResult", "Patch", "Proof", "Rejected", "Skip", "audited_template", "propose_fix"]

# Application order: history first (it changes which branch renders), markers last (they wrap what renders).
PATCH_CLASSES: tuple[tuple[str, Callable[[AuditedTemplate, Source], Patch | Skip]], ...] = (
    (reasoning.ID, reasoning.propose),
    (empty_content.ID, empty_content.propose),
    (arguments.ID, arguments.propose),
    (markers.ID_MARKERS, markers.propose),
)
_MARKER_IDS = (markers.ID_MARKERS, markers.ID_STOP)


class FixError(AuditError):
    kind = "fix"


@dataclass
class Rejected:
    patch: Patch
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {**self.patch.to_dict(), "reasons": self.reasons}


@dataclass
class FixResult:
    model: str
    # "proven" | "changes_inference" (offered, not proven: it changes deployed prompts) | "nothing_to_fix" |
    # "no_safe_patch"
    status: str
    message: str
    original: str
    before: ModelReport
    patched: str | None = None
    after: ModelReport | None = None
    proof: Proof | None = None
    offered: list[Patch] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)

    @property
    def failing(self) -> bool:
        """The model needs a patch: even buffer + delta breaks with its template."""
        return self.before.verdict == "unsafe"

    @property
    def exit_code(self) -> int:
        """1 when the model needs a patch and none is proven (a patch that changes deployed prompts is not)."""
        return 1 if self.status in ("no_safe_patch", "changes_inference") and self.failing else 0

    def diff(self, name: str = "chat_template.jinja") -> str:
        if self.patched is None:
            return ""
        return "".join(
            difflib.unified_diff(
                self.original.splitlines(keepends=True),
                self.patched.splitlines(keepends=True),
                fromfile=f"a/{name}",
                tofile=f"b/{name}",
            )
        )

    @property
    def libraries(self) -> dict[str, Any]:
        """The library versions the audits behind the fix ran with (its verdicts depend on them as the audit's)."""
        from tito_audit.report.model_report import AuditReport

        return AuditReport([self.before]).libraries

    def to_dict(self) -> dict[str, Any]:
        from tito_audit._version import __version__
        from tito_audit.report.model_report import SCHEMA_VERSION

        return {
            "schema_version": SCHEMA_VERSION,
            "tool_version": __version__,
            "libraries": self.libraries,
            "model": self.model,
            "status": self.status,
            "message": self.message,
            "verdict_before": self.before.verdict,
            "verdict_after": self.after.verdict if self.after else None,
            "offered": [p.to_dict() for p in self.offered],
            "rejected": [r.to_dict() for r in self.rejected],
            "skipped": [s.to_dict() for s in self.skipped],
            "proof": self.proof.to_dict() if self.proof else None,
            "diff": self.diff(),
            "template": self.patched,
        }


def audited_template(model: LoadedModel, options: AuditOptions, report: ModelReport) -> AuditedTemplate:
    """What the patch classes decide on: the model, the options, the audit, stop ids and thinking modes."""
    from tito_audit.audit.context import AuditContext

    ctx = AuditContext(model, options)
    return AuditedTemplate(model, options, report, ctx.stop_ids, ctx.thinking_modes)


def _prove(audited: AuditedTemplate, patches: list[Patch], text: str) -> tuple[Proof, ModelReport]:
    """The patched template's audit, under the original's options and with the conversations the original's
    counterexample search found (``AuditOptions.counterexamples``: the patch is proven on the same facts, and
    searched again), and the proof read from it."""
    from dataclasses import replace

    from tito_audit.audit.runner import audit_model

    found = (audited.report.scenarios.get("search") or {}).get("counterexamples") or []
    options = replace(audited.options, counterexamples=(*audited.options.counterexamples, *found))
    after = audit_model(audited.model.with_template(text, "tito-audit fix"), options)
    with_masks = any(p.id in _MARKER_IDS for p in patches)
    return prove(audited, patches, text, after, with_masks), after


def _chain(audited: AuditedTemplate, ids: set[str]) -> tuple[str, list[Patch]]:
    """Apply the chosen patch classes in order, each proposed on the previous one's output."""
    text, applied = audited.model.chat_template, list[Patch]()
    for pid, propose in PATCH_CLASSES:
        if pid not in ids and not (pid == markers.ID_MARKERS and ids & set(_MARKER_IDS)):
            continue
        try:
            patch = propose(audited, Source(text))
        except PatchError:
            continue
        if isinstance(patch, Patch):
            text, applied = patch.template, [*applied, patch]
    return text, applied


def _candidates(audited: AuditedTemplate, src: Source, result: FixResult) -> list[Patch]:
    """Every patch class proposed on the original template; those that do not apply go to ``result.skipped``."""
    candidates: list[Patch] = []
    for pid, propose in PATCH_CLASSES:
        try:
            out = propose(audited, src)
        except PatchError as exc:
            out = Skip(pid, str(exc))
        if isinstance(out, Patch):
            candidates.append(out)
        else:
            result.skipped.append(out)
    return candidates


def _prove_best(
    audited: AuditedTemplate, candidates: list[Patch], result: FixResult, stage: Callable[[str], None]
) -> tuple[str, list[Patch], Proof, ModelReport]:
    """The candidates proven together; when that fails, each alone and the proven ones together again. Returns
    the patched text, the patches in it (none when nothing holds), its proof and its audit; the patches that
    failed alone go to ``result.rejected``."""
    stage(f"proving {', '.join(p.id for p in candidates)} together")
    text, applied = _chain(audited, {p.id for p in candidates})
    proof, after = _prove(audited, applied, text)
    if not proof.offerable and len(candidates) > 1:
        good: list[Patch] = []
        for p in candidates:
            stage(f"proving {p.id} alone")
            alone, _ = _prove(audited, [p], p.template)
            if alone.offerable:
                good.append(p)
            else:
                result.rejected.append(Rejected(p, alone.reasons))
        if good:
            text, applied = _chain(audited, {p.id for p in good})
            proof, after = _prove(audited, applied, text)
        else:
            applied = []
    elif not proof.offerable:
        result.rejected.append(Rejected(candidates[0], proof.reasons))
        applied = []
    return text, applied, proof, after


def propose_fix(
    model: LoadedModel,
    options: AuditOptions | None = None,
    report: ModelReport | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> FixResult:
    """Audit (unless ``report`` is given), build the patches the findings call for, prove them, and say why."""
    from tito_audit.audit.context import AuditOptions
    from tito_audit.audit.runner import audit_model

    options = options or AuditOptions()
    stage = on_stage or (lambda _: None)
    if report is None:
        stage("auditing the original template")
        report = audit_model(model, options)
    if report.error:
        raise FixError(model.name, f"cannot fix a template the audit cannot run: {report.error}")
    audited = audited_template(model, options, report)
    result = FixResult(model.name, "nothing_to_fix", "", model.chat_template, report)
    try:
        src = Source(model.chat_template)
    except PatchError as exc:
        result.status = "no_safe_patch" if report.verdict != "safe" else "nothing_to_fix"
        result.message = f"the template cannot be rewritten: {exc}"
        return result
    candidates = _candidates(audited, src, result)
    if not candidates:
        result.status = "no_safe_patch" if result.failing else "nothing_to_fix"
        if result.failing:
            cause = next(iter(report.check("tool_append_prefix").active_findings), None)
            result.message = "no patch class applies" + (f" to the failure: {cause.message}" if cause else "")
        else:
            result.message = f"verdict {report.verdict}: no required patch, and no optional patch applies"
        return result

    text, applied, proof, after = _prove_best(audited, candidates, result, stage)
    cause = next(iter(report.check("tool_append_prefix").active_findings), None)
    no_required = result.failing and not any(p.required for p in candidates)
    if not applied or not proof.offerable:
        if applied:
            result.rejected.extend(Rejected(p, proof.reasons) for p in applied)
        result.status = "no_safe_patch"
        result.message = "no patch survived its proof: " + "; ".join(
            f"{r.patch.id}: {r.reasons[0] if r.reasons else 'failed'}" for r in result.rejected
        )
        if no_required:
            result.message = "no patch class applies to the failure" + (f": {cause.message}" if cause else "")
        result.proof = proof
        return result
    result.patched, result.after, result.proof, result.offered = text, after, proof, applied
    if result.failing and after.verdict == "unsafe":
        result.status = "no_safe_patch"
        result.message = "only optional patches are proven; the verdict stays unsafe" + (
            f" ({cause.message})" if no_required and cause else ""
        )
    elif proof.changes:
        result.status = "changes_inference"
        result.message = (
            f"verdict {report.verdict} -> {after.verdict}; the patch changes deployed prompts: "
            + "; ".join(proof.changes)
            + " (serve with the patched template too, or train and serve will differ)"
        )
    else:
        result.status = "proven"
        result.message = f"verdict {report.verdict} -> {after.verdict}"
    return result
