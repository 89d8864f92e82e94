"""Auditing one template file against one tokenizer, ending in exactly one class (see ``classify``).

Nothing here may raise for a bad template: every failure becomes the template's class with a one-line reason.
Statically unsafe templates are not rendered at all. The audit itself is ``tito_audit.audit.audit_model``
(``engine="audit"``) or a lighter simulation of every scenario (``engine="simulate"``); ``engine`` says which ran.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from tito_audit.errors import AuditError
from tito_audit.rendering import Renderer, RenderError, RenderLimits
from tito_audit.rendering.renderer import first_line
from tito_audit.scan import classify as C
from tito_audit.scan.discover import TemplateFile, read_template
from tito_audit.scan.hazards import hazards, literal_text
from tito_audit.scan.pick import missing_tokens

_SMOKE = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello"}]
_OTHER_DATE = dt.datetime(1999, 12, 31, 23, 59, 0)


@dataclass
class TemplateResult:
    name: str
    path: str
    tokenizer: str
    cls: str
    verdict: str | None = None
    reason: str = ""
    error_kind: str | None = None
    flags: list[dict[str, Any]] = field(default_factory=list)
    missing_tokens: list[str] = field(default_factory=list)
    scenarios_ok: int = 0
    scenarios_total: int = 0
    tokenizer_reason: str = ""
    engine: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _scenarios(model: Any, cache: dict[str, Any]) -> list[Any]:
    from tito_audit.rollout.tokens import special_token_strings
    from tito_audit.scenarios import build_scenarios

    key = model.name
    if key not in cache:
        cache[key] = build_scenarios(
            special_token_strings(model.tokenizer)[:3], thinking_modes=({}, {"enable_thinking": False})
        )
    return list(cache[key])


def _simulate_all(model: Any, renderer: Renderer, result: TemplateResult, cache: dict[str, Any]) -> None:
    """Built-in audit: play every scenario; provisional verdict from retokenization and bridge failures."""
    from tito_audit.rollout import stop_token_ids
    from tito_audit.rollout.simulate import simulate

    stops = stop_token_ids(model.tokenizer, renderer, model.generation_eos_ids)
    scenarios = _scenarios(model, cache)
    result.scenarios_total = len(scenarios)
    result.engine = "simulate"
    errors: list[RenderError] = []
    drift = broken = False
    for scenario in scenarios:
        sim = simulate(renderer, scenario, stops)
        if sim.error is not None:
            errors.append(sim.error)
            forced = C.class_of_render_kind(sim.error.kind)
            if forced:
                result.cls, result.error_kind, result.reason = forced, sim.error.kind, sim.error.message
                return
            continue
        result.scenarios_ok += 1
        traj = sim.trajectory
        broken |= bool(sim.bridge_errors)
        drift |= traj is not None and list(traj.input_ids[: len(sim.naive_ids)]) != list(sim.naive_ids)
    if result.scenarios_ok == 0:
        result.cls, result.error_kind = C.ALWAYS_RAISES, "always_raises"
        result.reason = f"every scenario raises; first: {errors[0].message}" if errors else "no scenario ran"
        return
    result.verdict = "unsafe" if broken else "tito-required" if drift else "safe"


def _audit_with_engine(model: Any, text: str, result: TemplateResult) -> None:
    from tito_audit.audit import audit_model

    report = audit_model(model.with_template(text, result.path))
    result.engine = "audit_model"
    checks = list(getattr(report, "checks", []) or [])
    result.scenarios_total = len(checks)
    result.scenarios_ok = sum(1 for c in checks if getattr(c, "status", "") != "error")
    if report.verdict in C.VERDICTS:
        result.verdict = report.verdict
        return
    result.error_kind = getattr(report, "error_kind", None) or "error"
    result.reason = str(report.error or "audit error").splitlines()[0][:300]
    result.cls = C.class_of_error_kind(result.error_kind)


def audit_template(
    template: TemplateFile,
    model: Any,
    tokenizer_reason: str = "",
    limits: RenderLimits | None = None,
    cache: dict[str, Any] | None = None,
    engine: str = "simulate",
) -> TemplateResult:
    """One template's result; never raises for anything the template does."""
    started = time.perf_counter()
    result = TemplateResult(template.name, str(template.path), model.name, cls="", tokenizer_reason=tokenizer_reason)
    try:
        _audit(template, model, limits or RenderLimits(), result, cache if cache is not None else {}, engine)
    except RenderError as err:  # a render outside the guarded scenario loop
        result.cls = C.class_of_render_kind(err.kind) or C.AUDIT_ERROR
        result.error_kind, result.reason = err.kind, err.message
    except AuditError as err:
        result.cls, result.error_kind, result.reason = (
            C.class_of_error_kind(err.kind),
            err.kind,
            err.one_line(),
        )
    except MemoryError:
        result.cls, result.error_kind, result.reason = (
            C.LIMIT,
            "memory",
            "audit exhausted the worker's memory",
        )
    except RecursionError:
        result.cls, result.error_kind, result.reason = C.LIMIT, "recursion", "audit recursed too deeply"
    except Exception as exc:  # the audit code failed on this template; classified, never a crash of the scan
        result.cls, result.error_kind = C.AUDIT_ERROR, type(exc).__name__
        result.reason = f"{type(exc).__name__}: {first_line(exc)}"
    if not result.cls:
        result.cls = C.decide(
            security=False,
            limit=False,
            always_raises=False,
            missing=result.missing_tokens,
            verdict=result.verdict,
            error_kind=result.error_kind,
        )
        if result.cls == C.MISSING_TOKENS:
            result.reason = "vocabulary lacks " + ", ".join(result.missing_tokens[:5])
    result.seconds = round(time.perf_counter() - started, 4)
    return result


def _audit(
    template: TemplateFile,
    model: Any,
    limits: RenderLimits,
    result: TemplateResult,
    cache: dict[str, Any],
    engine_name: str,
) -> None:
    from tito_audit.sources.load import compile_template

    try:
        text = read_template(template.path)
    except (OSError, ValueError) as exc:
        result.cls, result.error_kind, result.reason = C.UNREADABLE, "unreadable", first_line(exc)
        return
    try:
        compile_template(template.name, text)
    except AuditError as err:
        result.cls, result.error_kind, result.reason = C.DOES_NOT_COMPILE, err.kind, err.cause
        return
    except Exception as exc:  # the compiler itself choking (deep nesting, odd input)
        result.cls, result.error_kind = C.DOES_NOT_COMPILE, "template_compile"
        result.reason = f"chat template does not compile: {type(exc).__name__}: {first_line(exc)}"
        return
    found = hazards(text)
    result.flags = [h.to_dict() for h in found]
    security = [h for h in found if h.kind == "security"]
    if security:  # never render code that reaches for internals
        result.cls, result.error_kind = C.SECURITY, "security"
        result.reason = f"line {security[0].line}: {security[0].detail}"
        return
    result.missing_tokens = missing_tokens(model.tokenizer, literal_text(text))

    renderer = Renderer(model.tokenizer, text, limits=limits)
    _dynamic_flags(renderer, result)
    if engine_name == "audit":
        _audit_with_engine(model, text, result)
    else:
        _simulate_all(model, renderer, result, cache)


def _dynamic_flags(renderer: Renderer, result: TemplateResult) -> None:
    """Render one conversation three times (twice, then at another date): output that moves is flagged."""
    try:
        first = renderer.render(_SMOKE, add_generation_prompt=True)
    except RenderError as err:
        forced = C.class_of_render_kind(err.kind)
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
        if C.class_of_render_kind(err.kind):
            raise
        result.flags.append(
            {"kind": "nondeterministic", "detail": f"a repeat render failed: {err.message}", "line": None}
        )
