"""What a patch class is given and what it gives back: the audited template, a patch, or the reason it skips.

A patch is a list of edits of the template text plus the checks it is meant to fix. Patch classes find
their constructs in the template's structure (``source.Source``), never by model name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditOptions
    from tito_audit.report.model_report import ModelReport
    from tito_audit.sources.load import LoadedModel


@dataclass
class AuditedTemplate:
    """The model, the options and the audit of its original template: what every patch class decides on."""

    model: LoadedModel
    options: AuditOptions
    report: ModelReport
    stop_ids: tuple[int, ...]
    thinking_modes: list[dict[str, Any]]

    @property
    def stop_texts(self) -> list[str]:
        tok = self.model.tokenizer
        return [t for t in (tok.decode([i], skip_special_tokens=False) for i in self.stop_ids) if t]

    def renderer(self, template: str) -> Any:
        from tito_audit.rendering.renderer import Renderer

        options = self.options
        return Renderer(self.model.tokenizer, template, options.template_kwargs, options.date, options.limits)


@dataclass
class Patch:
    """One rewrite of the template, before it is proven."""

    id: str  # "reasoning_history" | "generation_markers" | "tool_arguments_json" | "empty_content_tool_calls"
    title: str
    why: str  # the audit finding(s) it answers
    template: str  # the template text with this patch applied
    changes: list[str]  # one line per rewritten construct, with its template line
    targets: tuple[str, ...]  # checks it must improve; the first must pass
    required: bool  # True when it answers a failing error-severity check (the verdict depends on it)
    changes_inference: bool = False  # declared up front: renders of inference conversations may change
    caveats: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "why": self.why,
            "changes": self.changes,
            "targets": list(self.targets),
            "required": self.required,
            "changes_inference": self.changes_inference,
            "caveats": self.caveats,
        }


@dataclass
class Skip:
    """A patch class that does not apply, or cannot be built for this template, and why."""

    id: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "reason": self.reason}
