"""Template coverage for one audit: which ``{% if %}`` arms the conversations played took (``rendering.coverage``).

Coverage is asked for only where it can change what the verdict claims: a template whose checks so far say
``safe`` or ``tito-required`` (an ``unsafe`` one has no claim an untaken arm could weaken). Then every render the
audit made without a recorder is traced again (``Renderer.trace_untraced``: the outputs are cached, only the
lines they run are wanted), the search's renders are traced as they run (and steer it: ``new_arms``), and the
arms history can reach whose test ran but which no conversation took are named: ``not_probed`` reasons
``template_line:N: TEST``, the first ``MAX_NAMED`` of them and a count of the rest. A SAFE with one is not a
clean SAFE (``report.verdict``, ``cli.audit``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tito_audit.rendering.analysis import compiled_template, template_code
from tito_audit.rendering.coverage import Branch, Recorder, TemplateBranches

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

MAX_NAMED = 6  # unexercised arms named one by one in not_probed; the rest are counted


class Coverage:
    """The arms of a template (``branches``), the renderer its audit renders with, and the recorder of what ran."""

    def __init__(self, branches: TemplateBranches, renderer: Any) -> None:
        self.branches = branches
        self.renderer = renderer
        self.recorder = Recorder(branches.codes)
        self.replayed = 0

    @classmethod
    def of(cls, ctx: AuditContext) -> Coverage | None:
        """The coverage of ``ctx``'s template; None for a renderer that is not a Jinja template, or a template that
        does not compile (it has no arms to take: its renders fail)."""
        template = ctx.model.chat_template
        if not ctx.engine.is_template or not template:
            return None
        try:
            compiled = compiled_template(template)
            branches = TemplateBranches(template_code(template), compiled.root_render_func, compiled.debug_info)
        except Exception:
            return None
        return cls(branches, ctx.renderer)

    def trace(self) -> None:
        """Trace every render made so far, and from now on every render as it runs."""
        self.replayed += self.renderer.trace_untraced(self.recorder)

    def arms_run(self) -> int:
        """How many arms ran so far (the search's targeting score reads its growth)."""
        ran = self.recorder.ran
        return sum(b.body_line in ran for b in self.branches.branches)

    def unexercised(self) -> list[Branch]:
        return self.branches.unexercised(self.recorder.ran)

    def not_probed(self) -> list[str]:
        """``template_line:N: TEST`` for the first ``MAX_NAMED`` arms no conversation took, ``template_lines:+K`` for
        the rest, ``coverage:WHY`` where nothing could be recorded."""
        if self.recorder.blocked:
            return ["coverage:blocked"]
        missed = self.unexercised()
        out = [b.name for b in missed[:MAX_NAMED]]
        if len(missed) > MAX_NAMED:
            out.append(f"template_lines:+{len(missed) - MAX_NAMED}")
        return out

    def summary(self) -> dict[str, Any]:
        """The report's ``scenarios.coverage``: the arms history can reach, how many ran, which did not."""
        history = [b for b in self.branches.branches if b.history and not b.raises]
        missed = self.unexercised()
        out: dict[str, Any] = {
            "arms": len(history),
            "ran": sum(b.body_line in self.recorder.ran for b in history),
            "unexercised": [{"line": b.line, "test": b.test} for b in missed],
        }
        if self.recorder.blocked:
            out["blocked"] = self.recorder.blocked
        return out
