"""Auditing one template file against one tokenizer, ending in exactly one class (see ``classify``).

Nothing here may raise for a bad template: every failure becomes the template's class with a one-line reason.
Statically unsafe templates are not rendered at all. The audit is ``tito_audit.audit.runner.audit_model`` itself (the
same checks and verdict rule as ``tito-audit audit MODEL --chat-template FILE``), on a context that keeps the
smoke renders. Two cheaper verdict-free endings come first: a smoke render that hits a limit or the sandbox,
and a template whose control tokens the vocabulary lacks (scenarios are played only until one renders, to tell
it from a template that raises for every scenario).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tito_audit.errors import AuditError, RenderError, failed_every_conversation, first_line
from tito_audit.rendering import Renderer, RenderLimits
from tito_audit.rendering.analysis import hazards, literal_text
from tito_audit.report import scan_classes as classify
from tito_audit.report.scan_report import TemplateResult
from tito_audit.scan.discover import TemplateFile, read_template
from tito_audit.scan.pick import Choice, Picker
from tito_audit.sources.control_tokens import missing_tokens, role_literals

if TYPE_CHECKING:
    from tito_audit.sources.synthesized import Synthesizer

_SMOKE = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]
# Conversations the counterexample search draws per template in a scan (``--search``): none by default. A scan
# triages hundreds of templates; even four conversations a template cost the corpus scan about twice its CPU time
# (docs/performance.md), so the search is `audit`'s (40 by default) and ``scan --search N``'s, and every scanned
# report says it was off. Coverage and the template's switches are still played.
SCAN_SEARCH = 0
_OTHER_DATE = dt.datetime(1999, 12, 31, 23, 59, 0)


def audit_template(
    template: TemplateFile,
    model: Any,
    tokenizer_reason: str = "",
    limits: RenderLimits | None = None,
    scenarios: str = "full",
    synthesizer: Synthesizer | None = None,
    search: tuple[int, int] = (SCAN_SEARCH, 0),
) -> TemplateResult:
    """One template's result; never raises for anything the template does. ``scenarios``: AuditOptions';
    ``search``: the counterexample search's budget and seed (AuditOptions.search, search_seed).

    With a ``synthesizer``, a template whose control tokens ``model`` lacks is audited on a tokenizer synthesized
    from them (``sources.synthesized``): an approximate verdict instead of ``missing_tokens``."""
    started = time.perf_counter()
    result = TemplateResult(template.name, str(template.path), model.name, cls="", tokenizer_reason=tokenizer_reason)
    try:
        _audit(template, model, limits or RenderLimits(), result, scenarios, synthesizer, search)
    except RenderError as err:  # a render outside the guarded scenario loop
        result.cls = classify.class_of_render_kind(err.kind) or classify.AUDIT_ERROR
        result.error_kind, result.reason = err.kind, err.message
    except AuditError as err:
        result.cls, result.error_kind, result.reason = (
            classify.class_of_error_kind(err.kind),
            err.kind,
            err.one_line(),
        )
    except MemoryError:
        result.cls, result.error_kind, result.reason = (
            classify.LIMIT,
            "memory",
            "audit exhausted the worker's memory",
        )
    except RecursionError:
        result.cls, result.error_kind, result.reason = classify.LIMIT, "recursion", "audit recursed too deeply"
    except Exception as exc:  # the audit code failed on this template; classified, never a crash of the scan
        result.cls, result.error_kind = classify.AUDIT_ERROR, type(exc).__name__
        result.reason = f"{type(exc).__name__}: {first_line(exc)}"
    if not result.cls:
        result.cls = classify.decide(
            security=False,
            limit=False,
            always_raises=False,
            missing=result.missing_tokens,
            verdict=result.verdict,
            error_kind=result.error_kind,
        )
        if result.cls == classify.MISSING_TOKENS:
            result.reason = "vocabulary lacks " + ", ".join(result.missing_tokens[:5])
    result.approximate = result.tokenizer_kind == "synthesized" and result.cls in classify.VERDICTS
    result.seconds = round(time.perf_counter() - started, 4)
    return result


def audit_auto(
    template: TemplateFile,
    picker: Picker,
    limits: RenderLimits | None = None,
    on_pick: Callable[[Choice], None] | None = None,
    scenarios: str = "full",
    synthesizer: Synthesizer | None = None,
    search: tuple[int, int] = (SCAN_SEARCH, 0),
) -> TemplateResult:
    """``--tokenizer auto``: pick the candidate whose control tokens the template writes, then ``audit_template``.

    Picking parses (and compiles) the template; the audit reuses both, and its ``seconds`` include the pick.
    """
    started = time.perf_counter()
    try:
        source = template.path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        source = ""
    try:
        literal = literal_text(source)
    except Exception:  # parsing choked (nesting too deep...): pick on the raw text, the audit classifies it
        literal = source
    choice = picker.choose(literal)
    if on_pick is not None:
        on_pick(choice)
    result = audit_template(template, picker.models[choice.name], choice.reason, limits, scenarios, synthesizer, search)
    result.stand_in = choice.score == 0 and result.tokenizer_kind == "real"
    result.seconds = round(time.perf_counter() - started, 4)
    return result


def _audit(
    template: TemplateFile,
    model: Any,
    limits: RenderLimits,
    result: TemplateResult,
    scenarios: str,
    synthesizer: Synthesizer | None = None,
    search: tuple[int, int] = (SCAN_SEARCH, 0),
) -> None:
    from tito_audit.audit.checks import verdict_inputs
    from tito_audit.audit.context import AuditContext, AuditOptions
    from tito_audit.audit.runner import audit_context
    from tito_audit.sources.load import compile_template

    try:
        text = read_template(template.path)
    except (OSError, ValueError) as exc:
        result.cls, result.error_kind, result.reason = classify.UNREADABLE, "unreadable", first_line(exc)
        return
    try:
        compile_template(template.name, text)
    except AuditError as err:
        result.cls, result.error_kind, result.reason = classify.DOES_NOT_COMPILE, err.kind, err.cause
        return
    except Exception as exc:  # the compiler itself choking (deep nesting, odd input)
        result.cls, result.error_kind = classify.DOES_NOT_COMPILE, "template_compile"
        result.reason = f"chat template does not compile: {type(exc).__name__}: {first_line(exc)}"
        return
    found = hazards(text)
    result.flags = [h.to_dict() for h in found]
    security = [h for h in found if h.kind == "security"]
    if security:  # never render code that reaches for internals
        result.cls, result.error_kind = classify.SECURITY, "security"
        result.reason = f"line {security[0].line}: {security[0].detail}"
        return
    # the control words it writes in role positions, read on the candidate (``control_tokens.role_literals``)
    roles = role_literals(Renderer(model.tokenizer, text, limits=limits))
    result.missing_tokens = missing_tokens(model.tokenizer, literal_text(text), model.hidden_specials, roles)
    if result.missing_tokens and synthesizer is not None:
        model = _synthesized(synthesizer, text, result, roles)

    started = time.perf_counter()
    # A scan keeps the verdict and its reasons, not the per-check report: only the checks the verdict reads, and
    # no count of the tokens a finding loses.
    options = AuditOptions(
        limits=limits,
        scenarios=scenarios,
        only_checks=verdict_inputs(),
        count_lost_tokens=False,
        search=search[0],
        search_seed=search[1],
    )
    ctx = AuditContext(model.with_template(text, result.path), options)
    _dynamic_flags(ctx.renderer, result)
    result.engine = "audit_model"
    if result.missing_tokens:
        _playable(ctx, result)
        return
    report = audit_context(ctx, started)
    result.scenarios_total = len(ctx.scenarios)
    result.scenarios_ok = int(report.scenarios.get("played", 0))
    result.verdict_reasons = list(report.verdict_reasons)
    result.adaptations = list(report.scenarios.get("adaptations", []))
    if report.verdict in classify.VERDICTS:
        result.verdict = report.verdict
        result.first_divergence = first_divergence(report)
        _scenario_flags(ctx, result)
        return
    result.error_kind = report.error_kind or "undecided"
    result.reason = str(report.error or "; ".join(report.verdict_reasons) or "audit error").splitlines()[0][:300]
    result.cls = classify.class_of_error_kind(result.error_kind)
    if result.cls == classify.ALWAYS_RAISES:
        _name_rejected(ctx, result)


DIVERGENCE_LIMIT = 400  # characters of a result's first divergence (the windows are bounded, messages are not)


def first_divergence(report: Any) -> str:
    """The first finding of the first failing check (else of the first warning), in the words every report uses
    (``formats.divergence``): what the page and the summary show under a verdict."""
    from tito_audit.formats.divergence import finding_sentence, first_active
    from tito_audit.report.quote import clipped

    for status in ("fail", "warn"):
        for check in report.checks:
            found = first_active(check) if check.status == status else None
            if found is not None:
                return clipped(f"{check.id}: {finding_sentence(found)}", DIVERGENCE_LIMIT)
    return ""


def _synthesized(synthesizer: Synthesizer, text: str, result: TemplateResult, roles: list[str]) -> Any:
    """The template's own synthesized model; the result says so (the verdict it gets is approximate)."""
    from tito_audit.sources.synthesized import choose_base

    base = choose_base(text, synthesizer.candidates, roles)
    model = synthesizer.model(text, result.path, base, roles)
    result.tokenizer, result.tokenizer_kind, result.tokenizer_base = model.name, "synthesized", base.name
    result.tokenizer_reason = f"no candidate has {', '.join(result.missing_tokens[:3])}: synthesized; {base.reason}"
    result.synthesized_tokens, result.missing_tokens = list(model.provenance.synthesized_tokens), []
    return model


def _name_rejected(ctx: Any, result: TemplateResult) -> None:
    """An always_raises result names the input shape it rejected (in ``rejected`` and in its reason)."""
    result.rejected = rejected_shapes(ctx)
    if result.rejected:
        first = result.rejected[0]
        shape = f"{first['scenario']} ({', '.join(first['roles'])}{', with tools' if first['tools'] else ''})"
        result.reason = f"rejects every conversation, e.g. {shape}: {first['error']}"[:300]


def rejected_shapes(ctx: Any, limit: int = 3) -> list[dict[str, Any]]:
    """The conversation shapes a template rejected (scenario, its roles, the error), one per distinct error."""
    seen: dict[str, dict[str, Any]] = {}
    for sim in ctx.simulations:
        if sim.error is None or sim.error.message in seen:
            continue
        roles = [
            m["role"]
            + ("+tool_calls" if m.get("tool_calls") else "")
            + ("+reasoning" if m.get("reasoning_content") else "")
            for m in sim.scenario.messages
        ]
        seen[sim.error.message] = {
            "scenario": sim.scenario.id,
            "roles": roles,
            "tools": bool(sim.scenario.tools),
            "error": sim.error.message[:200],
        }
        if len(seen) >= limit:
            break
    return list(seen.values())


def _playable(ctx: Any, result: TemplateResult) -> None:
    """For a template the vocabulary cannot judge: play scenarios (audit_model's own) until one renders.

    None renders: it is the class audit_model would give (raises for every scenario, or the limit it hit).
    """
    result.scenarios_total = len(ctx.scenarios)
    first: RenderError | None = None
    for scenario in ctx.scenarios:
        sim = ctx.simulation(scenario)
        if sim.ok:
            result.scenarios_ok = 1
            return
        first = first or sim.error
    if first is not None:
        kind, result.reason = failed_every_conversation(first)
        kind = kind or "always_raises"
        result.cls, result.error_kind = classify.class_of_error_kind(kind), kind
        if result.cls == classify.ALWAYS_RAISES:
            _name_rejected(ctx, result)


def _scenario_flags(ctx: Any, result: TemplateResult) -> None:
    """Scenarios that hit a limit or the sandbox while others rendered: flagged; the sandbox also sets the class
    (reaching for internals in any branch makes a template hostile), the audit's verdict is kept beside it."""
    seen: set[str] = set()
    for sim in ctx.simulations:
        err = sim.error
        if err is None or not classify.class_of_render_kind(err.kind) or err.kind in seen:
            continue
        seen.add(err.kind)
        detail = f"scenario {sim.scenario.id}: {err.message}"[:200]
        result.flags.append({"kind": f"scenario_{err.kind}", "detail": detail, "line": None})
        if err.kind == "security":
            result.cls, result.error_kind, result.reason = classify.SECURITY, "security", detail


def _dynamic_flags(renderer: Renderer, result: TemplateResult) -> None:
    """Render one conversation three times (twice, then at another date): output that moves is flagged."""
    try:
        first = renderer.render(_SMOKE, add_generation_prompt=True)
    except RenderError as err:
        forced = classify.class_of_render_kind(err.kind)
        if forced:
            raise
        return
    again = Renderer(renderer.tokenizer, renderer.chat_template, limits=renderer.limits)
    try:
        if again.render(_SMOKE, add_generation_prompt=True) != first:
            result.flags.append(
                {"kind": "nondeterministic", "detail": "two renders of one conversation differ", "line": None}
            )
        moved = renderer.with_date(_OTHER_DATE).render(_SMOKE, add_generation_prompt=True) != first
        if moved and not any(f["kind"] == "nondeterministic" for f in result.flags):
            result.flags.append({"kind": "reads_date", "detail": "the render changes with the date", "line": None})
    except RenderError as err:
        if classify.class_of_render_kind(err.kind):
            raise
        result.flags.append(
            {"kind": "nondeterministic", "detail": f"a repeat render failed: {err.message}", "line": None}
        )
