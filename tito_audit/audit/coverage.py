"""Template coverage for one audit: which ``{% if %}`` arms the conversations played took (``rendering.coverage``).

Coverage is asked for only where it can change what the verdict claims: a template whose checks so far say
``safe`` or ``tito-required`` (an ``unsafe`` one has no claim an untaken arm could weaken). Then every render the
audit made is played once more, through the template's instrumented copy (``Renderer.trace_untraced``: the
outputs are cached, only the arms they take are wanted), the search's as it goes (the arms each conversation takes
first steer it: ``arms_run``; a steered search renders through the copy itself, ``Renderer.render_through``: one
render instead of two), and the arms history can reach whose ``if`` was reached but which no conversation
took are named: ``not_probed`` reasons ``template_line:N: TEST``, the first ``MAX_NAMED`` of them and a count of
the rest. A SAFE with one is not a clean SAFE (``cli.audit``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tito_audit.rendering.analysis import compiled_template, template_code
from tito_audit.rendering.coverage import PROBE, Branch, Recorder, TemplateBranches
from tito_audit.rendering.macro_memo import MEMO, MacroMemo
from tito_audit.rendering.template_inputs import render_compiled

if TYPE_CHECKING:
    from tito_audit.audit.context import AuditContext

MAX_NAMED = 6  # unexercised arms named one by one in not_probed; the rest are counted
# not_probed reasons of a verdict whose template lines could not be measured: a renderer that is not a Jinja template
# (``--renderer``: its code is not ours to instrument), a template whose code did not compile or take our probes
UNMEASURED_RENDERER = "coverage:renderer"
UNMEASURED_COMPILE = "coverage:not_compiled"
UNMEASURED_PROBES = "coverage:not_instrumented"
# a template with arms but no loop over the messages tito-audit recognizes (``for ... in messages``): renamed
# (``{% set conv = messages %}``), inside a macro, recursive; which arms history reaches cannot be told
UNMEASURED_HISTORY = "coverage:no_message_loop"


class Coverage:
    """The arms of a template (``branches``), the renderer its audit renders with, and the recorder of what ran."""

    def __init__(self, branches: TemplateBranches, instrumented: Any, renderer: Any) -> None:
        self.branches = branches
        self.instrumented = instrumented
        self.renderer = renderer
        self.recorder = Recorder()
        self.memo = MacroMemo(self.recorder)  # macros that render the same text for the same inputs, rendered once
        self.replayed = 0
        self._needed: set[int] | None = None  # the compiled lines of the arms ``summary`` counts (``complete``)

    @classmethod
    def of(cls, ctx: AuditContext) -> Coverage | str:
        """The coverage of ``ctx``'s template, or why it cannot be measured (a ``not_probed`` reason: a SAFE whose
        template lines were not measured is not the SAFE of a template whose every reachable arm ran): a renderer
        that is not a Jinja template, a template our parse of jinja's code does not compile, one whose compiled
        code our probes do not fit, or one with arms but no loop over the messages we recognize."""
        template = ctx.model.chat_template
        if not ctx.engine.is_template or not template:
            return UNMEASURED_RENDERER
        try:
            compiled = compiled_template(template)
            branches = TemplateBranches(template_code(template), compiled.debug_info)
            instrumented = branches.instrumented(compiled)
        except Exception:
            return UNMEASURED_COMPILE
        if instrumented is None:
            return UNMEASURED_PROBES
        if branches.branches and not branches.history_found:
            return UNMEASURED_HISTORY
        return cls(branches, instrumented, ctx.renderer)

    def trace(self, until_complete: bool = False) -> None:
        """Play every render made since the last call through the instrumented copy; with ``until_complete``, only
        until every arm history can reach has run (``complete``): the renders left cannot change what coverage
        reports, and are dropped. Not for a search that is steered by ``arms_run`` (it counts every arm)."""
        self.replayed += self.renderer.trace_untraced(self.play, self.complete if until_complete else None)

    def play(self, renderer: Any, messages: Any, tools: Any, agp: bool) -> str:
        """One render through the instrumented copy (``renderer``'s kwargs): the text the template renders, and
        the arms it takes recorded."""
        kwargs = renderer.template_kwargs
        probe = {PROBE: self.recorder.probe, MEMO: self.memo}
        try:
            return render_compiled(self.instrumented, renderer.tokenizer, messages, tools, agp, kwargs, probe)
        except RecursionError:  # the memo adds a frame to each macro call: rendered as without it
            return render_compiled(
                self.instrumented, renderer.tokenizer, messages, tools, agp, kwargs, {**probe, MEMO: None}
            )

    def complete(self) -> bool:
        """Every arm history can reach, except those that raise, has run: ``summary`` and ``not_probed`` are what
        they will stay, whatever else runs."""
        if self._needed is None:
            self._needed = {b.body_line for b in self.branches.branches if b.history and not b.raises}
        return self._needed <= self.recorder.ran

    def skip(self, since: set[int] | None = None) -> None:
        """Leave the renders made since the last ``trace`` out of the coverage (a search too small to steer: its
        arms are not counted, and cost nothing); ``since``: and the arms recorded since that ``checkpoint`` (renders
        made through ``play``, ``Renderer.render_through``)."""
        self.renderer.drop_untraced()
        if since is not None:
            self.recorder.ran = set(since)

    def checkpoint(self) -> set[int]:
        """The arms recorded so far, for ``skip`` to go back to."""
        return set(self.recorder.ran)

    def arms_run(self) -> int:
        """How many arms ran so far (the search's targeting score reads its growth)."""
        ran = self.recorder.ran
        return sum(b.body_line in ran for b in self.branches.branches)

    def unexercised(self) -> list[Branch]:
        return self.branches.unexercised(self.recorder.ran)

    def not_probed(self) -> list[str]:
        """``template_line:N: TEST`` for the first ``MAX_NAMED`` arms no conversation took, ``template_lines:+K`` for
        the rest."""
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
        return out
