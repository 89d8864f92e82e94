"""The proofs a patch must pass before it is offered.

1. The audit again, with the patched template and the same tokenizer: every check a patch targets improves
   (its first target passes), and no check gets a worse status than before.
2. Inference equivalence: for what a model sees when serving (each scenario's prompt up to the generation
   prompt with no earlier assistant turn, with and without tools, in every thinking mode; and the first
   assistant turn as the model generates it) the patched template renders exactly the same token ids. Later
   turns' completions (the text after each generation prompt) are compared as text. The prompt before every
   later assistant turn, earlier assistant turns present (what a server renders for turn 2, 3...), is compared
   as token ids too: a patch that changes one is not proven, and the proof says what it changes (``changes``:
   "turn >= 2 prompts keep earlier reasoning"), so the patched template is served as it is trained.
3. For generation markers: ``return_assistant_tokens_mask`` equals the token buffer's loss mask (1 exactly on
   the sampled ids, stop token included) in every episode whose ids a re-render reproduces, in every thinking
   mode: markers placed for one mode's generation prompt and wrong in another are not proven.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tito_audit.errors import RenderError
from tito_audit.fix.mask_proof import MaskProof, mask_proof, mask_reasons
from tito_audit.fix.patch import AuditedTemplate, Patch
from tito_audit.rollout.tokens import common_prefix_len, special_token_strings

if TYPE_CHECKING:
    from tito_audit.report.model_report import ModelReport

STATUS_RANK = {"pass": 0, "not_applicable": 0, "warn": 1, "fail": 2, "error": 3}
VERDICT_RANK = {"safe": 0, "tito-required": 1, "unsafe": 2, "error": 3}


@dataclass
class CheckChange:
    id: str
    before: str
    after: str
    findings_before: int
    findings_after: int

    @property
    def regressed(self) -> bool:
        worse = STATUS_RANK.get(self.after, 3) > STATUS_RANK.get(self.before, 3)
        return worse or (self.before == "pass" and self.after == "not_applicable")

    @property
    def improved(self) -> bool:
        if self.before in ("pass", "not_applicable"):
            return False
        return self.after == "pass" or (
            STATUS_RANK.get(self.after, 3) <= STATUS_RANK.get(self.before, 3)
            and self.findings_after < self.findings_before
        )


def compare_checks(before: ModelReport, after: ModelReport) -> list[CheckChange]:
    after_by_id = {c.id: c for c in after.checks}
    out = []
    for c in before.checks:
        a = after_by_id.get(c.id)
        out.append(
            CheckChange(
                c.id,
                c.status,
                a.status if a else "error",
                len(c.active_findings),
                len(a.active_findings) if a else 0,
            )
        )
    return out


@dataclass
class Difference:
    conversation: str
    index: int | None  # first divergent token (None for text comparisons)
    expected: str  # original template, around the divergence
    actual: str  # patched template
    tool_call_turn: bool = False  # the conversation ends with an assistant turn that calls tools
    turn: int = 0  # later prompts: the assistant turn (1-based) the prompt is for
    what: str = ""  # later prompts: what the patch changes in it ("keep earlier reasoning")


@dataclass
class Equivalence:
    compared: int = 0
    identical: int = 0
    differences: list[Difference] = field(default_factory=list)
    newly_rendering: int = 0  # the original template raised, the patched one renders
    both_fail: int = 0
    later_compared: int = 0
    later_identical: int = 0
    later_differences: list[Difference] = field(default_factory=list)
    prompts_compared: int = 0  # prompts before a later assistant turn, earlier assistant turns present
    prompts_identical: int = 0
    prompt_differences: list[Difference] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return not self.differences and not self.prompt_differences

    @property
    def changes(self) -> list[str]:
        """What the patch changes in deployed prompts, one line per kind of change, from its earliest turn."""
        first: dict[str, int] = {}
        for d in self.prompt_differences:
            first[d.what] = min(first.get(d.what, d.turn), d.turn)
        counts = {what: sum(1 for d in self.prompt_differences if d.what == what) for what in first}
        return [
            f"turn ≥ {turn} prompts {what} ({counts[what]} of {self.prompts_compared} later prompts)"
            for what, turn in sorted(first.items(), key=lambda kv: (kv[1], kv[0]))
        ]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["differences"] = d["differences"][:20]
        d["later_differences"] = d["later_differences"][:20]
        d["prompt_differences"] = d["prompt_differences"][:20]
        d["holds"] = self.holds
        d["changes"] = self.changes
        return d


@dataclass
class Proof:
    verdict_before: str
    verdict_after: str
    checks: list[CheckChange]
    equivalence: Equivalence
    masks: MaskProof | None
    reasons: list[str]  # why it cannot be offered (empty when it can)
    flagged: list[str]  # inference renders that change, declared by the patches that change them
    notes: list[str] = field(default_factory=list)  # limits of a proven patch (masks in other modes)

    @property
    def changes(self) -> list[str]:
        """Deployed prompts the patch changes: it can be offered, never as proven (serve what you train)."""
        return self.equivalence.changes

    @property
    def offerable(self) -> bool:
        return not self.reasons

    @property
    def ok(self) -> bool:
        """Proven: it can be offered and it changes no deployed prompt."""
        return not self.reasons and not self.changes

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "changes": self.changes,
            "verdict_before": self.verdict_before,
            "verdict_after": self.verdict_after,
            "checks": [asdict(c) | {"regressed": c.regressed, "improved": c.improved} for c in self.checks],
            "equivalence": self.equivalence.to_dict(),
            "masks": self.masks.to_dict() if self.masks else None,
            "reasons": self.reasons,
            "flagged": self.flagged,
            "notes": self.notes,
        }


def _window(audited: AuditedTemplate, ids: Sequence[int], at: int) -> str:
    tok = audited.model.tokenizer
    return str(tok.decode(list(ids[max(0, at - 3) : at + 6]), skip_special_tokens=False))


def inference_equivalence(audited: AuditedTemplate, original: str, patched: str) -> Equivalence:
    """Compare what serving renders: prompts with no earlier assistant turn and the first generated turn."""
    from tito_audit.audit.simulation import adapt_to_template
    from tito_audit.scenarios import build_scenarios

    eq = Equivalence()
    base_o, base_p = audited.renderer(original), audited.renderer(patched)
    seen: set[str] = set()
    later_seen: set[str] = set()
    for scenario in build_scenarios(special_token_strings(audited.model.tokenizer), audited.thinking_modes):
        mode = scenario.kwargs
        ro = base_o.with_kwargs(**mode) if mode else base_o
        rp = base_p.with_kwargs(**mode) if mode else base_p
        messages, _, _ = adapt_to_template(ro, scenario)
        tools = list(scenario.tools)
        assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        if not assistants:
            continue
        first = assistants[0]
        convs = [
            (f"{scenario.id}: prompt", messages[:first], tools, True),
            (f"{scenario.id}: prompt without tools", messages[:first], None, True),
            (f"{scenario.id}: first assistant turn", messages[: first + 1], tools, False),
        ]
        for name, msgs, tls, agp in convs:
            key = json.dumps([msgs, tls is not None, agp, mode], sort_keys=True, default=repr)
            if key in seen:
                continue
            seen.add(key)
            _compare(audited, eq, name, ro, rp, msgs, tls, agp, bool(not agp and msgs[-1].get("tool_calls")))
        for n, i in enumerate(assistants[1:], start=2):
            key = json.dumps([messages[: i + 1], mode], sort_keys=True, default=repr)
            if key in later_seen:
                continue
            later_seen.add(key)
            _compare_prompt(audited, eq, f"{scenario.id}: prompt for assistant turn {n}", ro, rp, messages, i, tools, n)
            try:
                co, cp = _completion(ro, messages, i, tools), _completion(rp, messages, i, tools)
            except RenderError:
                continue
            eq.later_compared += 1
            if co == cp:
                eq.later_identical += 1
            else:
                at = common_prefix_len(co, cp)
                eq.later_differences.append(
                    Difference(
                        f"{scenario.id}: assistant message {i}",
                        None,
                        co[at : at + 60],
                        cp[at : at + 60],
                        bool(messages[i].get("tool_calls")),
                    )
                )
    return eq


def _compare_prompt(
    audited: AuditedTemplate,
    eq: Equivalence,
    name: str,
    ro: Any,
    rp: Any,
    messages: list[dict[str, Any]],
    i: int,
    tools: Any,
    turn: int,
) -> None:
    """The prompt before assistant message ``i`` (earlier assistant turns present) under both templates, as ids."""
    try:
        ids_o = ro.render_ids(messages[:i], tools=tools, add_generation_prompt=True)
        ids_p = rp.render_ids(messages[:i], tools=tools, add_generation_prompt=True)
    except RenderError:
        return
    eq.prompts_compared += 1
    if ids_o == ids_p:
        eq.prompts_identical += 1
        return
    at = common_prefix_len(ids_o, ids_p)
    what = _what_changes(audited, ro, rp, messages[:i], tools)
    eq.prompt_differences.append(
        Difference(name, at, _window(audited, ids_o, at), _window(audited, ids_p, at), False, turn, what)
    )


def _what_changes(audited: AuditedTemplate, ro: Any, rp: Any, history: list[dict[str, Any]], tools: Any) -> str:
    """What the patched template writes otherwise in a prompt: the message whose text holds the first difference
    (located with the patched template's renders of the history's prefixes), and whether what it adds there is
    that message's reasoning, or a reasoning block in the template's own delimiters."""
    from tito_audit.scenarios.adapt import reasoning_of
    from tito_audit.scenarios.reasoning import reasoning_marks

    try:
        text_o = ro.render(history, tools=tools, add_generation_prompt=True)
        text_p = rp.render(history, tools=tools, add_generation_prompt=True)
        ends = [len(rp.render(history[: k + 1], tools=tools)) for k in range(len(history))]
    except RenderError:
        return "render differently"
    at = common_prefix_len(text_o, text_p)
    k = next((n for n, end in enumerate(ends) if at < end), len(history) - 1)
    m = history[k]
    if m.get("role") != "assistant":
        return f"render earlier {m.get('role')} messages differently"
    added = text_p[at : ends[k]]
    thought = reasoning_of(m)
    if thought and thought in added and thought not in text_o:
        return "keep earlier reasoning"
    if any(d in added for d in reasoning_marks(audited.model.chat_template).delimiters):
        return "keep earlier (empty) reasoning blocks"
    if m.get("tool_calls"):
        return "render earlier tool calls differently"
    return "render earlier assistant turns differently"


def _completion(renderer: Any, messages: list[dict[str, Any]], i: int, tools: Any) -> str:
    prompt = renderer.render(messages[:i], tools=tools, add_generation_prompt=True)
    full = renderer.render(messages[: i + 1], tools=tools)
    return str(full[common_prefix_len(prompt, full) :])


def _compare(
    audited: AuditedTemplate,
    eq: Equivalence,
    name: str,
    ro: Any,
    rp: Any,
    msgs: list[dict[str, Any]],
    tools: Any,
    agp: bool,
    calls: bool,
) -> None:
    try:
        ids_o: list[int] | None = ro.render_ids(msgs, tools=tools, add_generation_prompt=agp)
    except RenderError:
        ids_o = None
    try:
        ids_p: list[int] | None = rp.render_ids(msgs, tools=tools, add_generation_prompt=agp)
    except RenderError as exc:
        if ids_o is None:
            eq.both_fail += 1
            return
        eq.compared += 1
        eq.differences.append(
            Difference(name, None, _window(audited, ids_o, 0), f"patched template raises: {exc.message}", calls)
        )
        return
    if ids_o is None or ids_p is None:
        eq.newly_rendering += ids_o is None
        return
    eq.compared += 1
    if ids_o == ids_p:
        eq.identical += 1
        return
    at = common_prefix_len(ids_o, ids_p)
    eq.differences.append(Difference(name, at, _window(audited, ids_o, at), _window(audited, ids_p, at), calls))


def prove(
    audited: AuditedTemplate,
    patches: Sequence[Patch],
    patched: str,
    after: ModelReport,
    with_masks: bool,
) -> Proof:
    """The three proofs of the module docstring, in order: the audit again, inference equivalence, masks."""
    before = audited.report
    checks = compare_checks(before, after) if not after.error else []
    reasons = _audit_reasons(before, after, patches, checks)
    eq = inference_equivalence(audited, audited.model.chat_template, patched)
    # Patches that declare an inference change may change assistant turns that call tools, nothing else.
    declared = [p for p in patches if p.changes_inference]
    diffs = eq.differences + eq.later_differences
    outside = [d for d in diffs if not (declared and d.tool_call_turn)]
    flagged = [c for p in declared for c in p.caveats] if diffs and declared else []
    if outside:
        reasons.append(
            f"inference renders change in {len(eq.differences)} of {eq.compared} conversations and "
            f"{len(eq.later_differences)} of {eq.later_compared} generated turns (first: {outside[0].conversation})"
        )
    masks = mask_proof(audited, patched) if with_masks else None
    reasons += mask_reasons(masks)
    return Proof(before.verdict, after.verdict, checks, eq, masks, reasons, flagged, [])


def _audit_reasons(
    before: ModelReport, after: ModelReport, patches: Sequence[Patch], checks: list[CheckChange]
) -> list[str]:
    """Why the patched template's audit does not prove the patches: it cannot be audited, a check regressed, a
    patch's target did not improve (its first, required target must pass), or the verdict worsened."""
    reasons: list[str] = []
    if after.error:
        reasons.append(f"the patched template cannot be audited: {after.error}")
    by_id = {c.id: c for c in checks}
    after_by_id = {c.id: c for c in after.checks}
    for c in checks:
        if c.regressed:
            found = after_by_id[c.id].active_findings if c.id in after_by_id else []
            detail = f" ({found[0].message})" if found else ""
            reasons.append(f"{c.id} regressed: {c.before} -> {c.after}{detail}")
    for p in patches:
        for n, target in enumerate(p.targets):
            change = by_id.get(target)
            if change is None or change.before in ("pass", "not_applicable"):
                continue
            if n == 0 and p.required and change.after != "pass":
                reasons.append(f"{p.id}: {target} still {change.after} ({change.findings_after} finding(s))")
            elif not change.improved:
                reasons.append(f"{p.id}: {target} not improved ({change.before} -> {change.after})")
    if VERDICT_RANK.get(after.verdict, 3) > VERDICT_RANK.get(before.verdict, 3):
        reasons.append(f"verdict worsened: {before.verdict} -> {after.verdict}")
    return reasons
