"""tool_call_serialization: parse -> re-serialize drift of the tool calls a model emits.

The template's own form is found in its render of the parsed dict; each other form (``json.dumps`` spacing
``{"city": "Paris"}``, compact separators ``{"city":"Paris"}``, the keys in another order, non-ASCII text escaped)
is put in its place and both are encoded: where the ids differ, a model that samples that form is re-serialized.
Also Python ``repr`` leaks (``True``, single quotes), and arguments passed as a JSON string rendering differently
from the same dict.

**What it counts.** ``data.forms_compared``, ``forms_drifted``, ``drifted_forms`` and ``drift_rate`` (drifted /
compared, which sits next to ``roundtrip``'s non-canonical rate); ``forms_not_compared`` names every form it did
not compare and why (one key has no other order, ASCII arguments have nothing to escape, the template does not
write the arguments as JSON: XML parameters, a repr). A template that writes no form as JSON compares nothing and
is ``not_applicable``, never ``pass``. The one finding with a token window carries the rate.

**Example** (``Qwen/Qwen2.5-7B-Instruct``, ``single_call/booleans``, class ``serialization``): ``drift rate 3/4
likely JSON forms (the template writes spaced JSON)``; ``a call sampled in 3 of 4 likely JSON forms (compact
separators, reversed key order, ascii escapes) is re-serialized as spaced JSON after parsing``:

    sampled      16370 'arguments' 788 '":' 5212 ' {"' 1631 'query' | 3252 '":"' 48406 'budget' 2198 '","'
    re-rendered  16370 'arguments' 788 '":' 5212 ' {"' 1631 'query' | 788 '":' 330 ' "' 48406 'budget'

The summary adds the finding without a token window: ``arguments given as a JSON string render differently from
the same dict`` (its ``tojson`` quotes a string). ``microsoft/Phi-3-mini-4k-instruct`` renders no call: no form is
compared and the check is ``not_applicable``, its summary naming the four forms not compared.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tito_audit.audit.checks.base import check
from tito_audit.audit.collector import Collector, divergence
from tito_audit.audit.context import AuditContext
from tito_audit.errors import RenderError
from tito_audit.report.findings import Finding, Outcome
from tito_audit.rollout.call_arguments import arguments_dict
from tito_audit.scenarios.adapt import call_function, with_arguments

Form = Callable[[dict[str, Any]], str]

# The JSON a model is likely to sample for one call's arguments (a parser maps every one to the same dict): the
# spacing of Python's json.dumps (transformers' ``tojson``), compact separators, the keys in another order, non-ASCII
# text escaped. Each form is compared where it differs from the others for these arguments; a form that cannot be
# (one key has no other order, ASCII text no escapes) is counted as not compared, with why.
_FORMS: dict[str, Form] = {
    "spaced": lambda a: json.dumps(a, ensure_ascii=False),
    "compact separators": lambda a: json.dumps(a, separators=(",", ":"), ensure_ascii=False),
    "reversed key order": lambda a: json.dumps(dict(reversed(list(a.items()))), ensure_ascii=False),
    "ascii escapes": lambda a: json.dumps(a, ensure_ascii=True),
}


_NOT_JSON = "the template does not write the arguments as JSON"


def _with_args(message: dict[str, Any], args: Any) -> dict[str, Any]:
    calls = [with_arguments(c, args) for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def _not_a_form(name: str, args: dict[str, Any]) -> str | None:
    """Why ``name`` is not a form of its own for ``args`` (None: it is one)."""
    if name == "reversed key order" and len(args) < 2:
        return "one key: no other order"
    if name == "ascii escapes" and json.dumps(args, ensure_ascii=True) == json.dumps(args, ensure_ascii=False):
        return "ASCII arguments: nothing to escape"
    return None


@check(
    id="tool_call_serialization",
    title="Tool-call re-serialization",
    severity="warning",
    order=100,
    explanation="""
Rollout code parses the model's tool call into a dict and the template serializes it again (`tojson`, its
own separators and key order, sometimes Python `repr` with `True` and single quotes). Whenever the model's
own JSON differs from the template's normal form, the re-rendered call is not the sampled text. Measured for
the JSON a model is likely to sample (json.dumps spacing, compact separators, another key order, escaped
non-ASCII): the drift rate is the share of those forms that do not survive parse + re-render.""",
    fix_hint="""
Keep the sampled ids; if you must re-render, keep the raw argument string the model produced and pass it as
a string (templates that print string arguments verbatim then reproduce it).""",
)
def tool_call_serialization(ctx: AuditContext) -> Outcome:
    found = Collector(ctx, "tool_call_serialization")
    tool_sims = [s for s in ctx.ok_simulations() if "tool" in s.scenario.tags]
    if not tool_sims:
        return Outcome(not_applicable="no tool conversation renders with this template")
    # multi-key arguments with JSON booleans first (every form but escapes), then non-ASCII ones (escapes)
    tool_sims.sort(key=lambda s: (not s.scenario.id.startswith("single_call/booleans"), "cjk" not in s.scenario.tags))
    not_compared: dict[str, str] = {}
    drifted: list[str] = []
    windows: list[Finding] = []
    owns: list[str] = []
    pending = list(_FORMS)
    for n, sim in enumerate(tool_sims[:2]):
        own, pending = _forms_of(ctx, found, sim, pending, not_compared, drifted, windows, strings=n == 0)
        if own is not None:
            owns.append(own)
    for name in pending:
        not_compared.setdefault(name, "no scenario's arguments make it a form of its own")
    compared = found.comparisons
    rate = len(drifted) / compared if compared else None
    own_form = owns[0] if owns else None
    if windows:  # one finding for the drift, at the first drifting form's divergence, with the rate
        drift = windows[0]
        drift.message = (
            f"a call sampled in {len(drifted)} of {compared} likely JSON forms ({', '.join(drifted)}) is "
            f"re-serialized as {own_form} JSON after parsing"
        )
        drift.rate = rate
        found.findings.insert(0, drift)
    data = {
        "forms_compared": compared,
        "forms_drifted": len(drifted),
        "drifted_forms": drifted,
        "forms_not_compared": {k: v for k, v in not_compared.items() if k not in drifted},  # (k: why)
        "template_form": own_form,
        "drift_rate": rate,
    }
    if compared:
        scope = f"drift rate {len(drifted)}/{compared} likely JSON forms (the template writes {own_form} JSON)"
    else:
        scope = "no JSON form compared (the template does not write the arguments as JSON)"
    skipped = {k: v for k, v in not_compared.items() if k not in drifted}
    if skipped:
        scope += f"; {len(skipped)} not compared ({'; '.join(f'{k}: {v}' for k, v in skipped.items())})"
    first = next((f.message for f in found.findings if f.index is None), "")
    summary = scope if not first else f"{scope}; {first}"
    return found.outcome(summary, scope, data)


def _forms_of(
    ctx: AuditContext,
    found: Collector,
    sim: Any,
    pending: list[str],
    not_compared: dict[str, str],
    drifted: list[str],
    windows: list[Finding],
    strings: bool,
) -> tuple[str | None, list[str]]:
    """Compare, on ``sim``'s first tool call, every pending form these arguments make: the call sampled in that
    form against the template's re-render of the parsed dict. Returns the template's own form and the forms still
    pending; each drifting form's divergence goes to ``windows``. ``strings``: also check repr leaks and arguments
    passed as a JSON string (once)."""
    renderer = ctx.renderer_for(sim.scenario)
    tools = list(sim.scenario.tools)
    idx = next(i for i, m in enumerate(sim.messages) if m.get("tool_calls"))
    msg = sim.messages[idx]
    args = arguments_dict(call_function(msg["tool_calls"][0])["arguments"])
    if args is None:
        return None, pending
    history = sim.messages[:idx]
    try:
        canonical = renderer.render([*history, _with_args(msg, args)], tools=tools)
        prompt = renderer.render(history, tools=tools, add_generation_prompt=True)
    except RenderError as err:
        found.failed(sim.scenario.id, err)
        return None, pending
    call_text = canonical[len(prompt) :] if canonical.startswith(prompt) else canonical
    forms = {name: form(args) for name, form in _FORMS.items()}
    own = next((name for name, text in forms.items() if text in call_text and _not_a_form(name, args) is None), None)
    left = []
    for name in pending:
        why = _not_a_form(name, args) or (_NOT_JSON if own is None else None)
        if why is not None:
            if not_compared.get(name) != _NOT_JSON:  # what one scenario showed of the template stands
                not_compared[name] = why
            left.append(name)
        elif own is not None:
            at = canonical.rfind(forms[own])
            sampled = canonical[:at] + forms[name] + canonical[at + len(forms[own]) :]
            found.compared()
            finding = divergence(
                ctx,
                "tool_call_serialization",
                sim.scenario.id,
                renderer.encode(sampled),
                renderer.encode(canonical),
                f"a call sampled with {name} JSON is re-serialized as {own} JSON after parsing",
                cls="serialization",
            )
            if finding is not None:
                drifted.append(name)
                windows.append(finding)
            not_compared.pop(name, None)
    if strings:
        _repr_and_strings(renderer, found, sim, history, msg, args, canonical, call_text, tools)
    return own, left


def _repr_and_strings(
    renderer: Any,
    found: Collector,
    sim: Any,
    history: list[dict[str, Any]],
    msg: dict[str, Any],
    args: dict[str, Any],
    canonical: str,
    call_text: str,
    tools: list[Any],
) -> None:
    """Findings without a token window: arguments written as a Python repr, a JSON string rendered otherwise."""
    repr_leak = [s for s in ("True", "False", "None") if s in call_text] or (["quotes"] if "{'" in call_text else [])
    if repr_leak:
        found.add(
            sim.scenario.id, "serialization", f"arguments render as Python repr ({', '.join(repr_leak)}), not JSON"
        )
    try:
        as_string = renderer.render([*history, _with_args(msg, json.dumps(args, ensure_ascii=False))], tools=tools)
        if as_string != canonical:
            found.add(
                sim.scenario.id,
                "serialization",
                "arguments given as a JSON string render differently from the same dict",
            )
    except RenderError as exc:
        found.add(sim.scenario.id, "serialization", f"arguments given as a JSON string are rejected: {exc.message}")
