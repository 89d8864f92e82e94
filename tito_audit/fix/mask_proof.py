"""The mask proof a patch that adds generation markers must pass: ``return_assistant_tokens_mask`` equals the token
buffer's loss mask (1 exactly on the sampled ids, stop token included) in every episode whose ids a re-render
reproduces, in every thinking mode: markers placed for one mode's generation prompt and wrong in another are not
proven (``fix.proof`` runs it after the audit and inference equivalence)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tito_audit.errors import RenderError
from tito_audit.fix.patch import AuditedTemplate
from tito_audit.rollout.probes import CHAT
from tito_audit.rollout.tokens import special_token_strings
from tito_audit.scenarios.spec import Message, Scenario


@dataclass
class MaskProof:
    episodes: int = 0
    exact: int = 0
    not_comparable: int = 0
    mismatches: list[str] = field(default_factory=list)
    by_mode: dict[str, list[int]] = field(default_factory=dict)  # mode -> [exact, compared]

    @property
    def holds(self) -> bool:
        """Exact in every comparable episode of every thinking mode (and at least one of the default mode)."""
        default = self.by_mode.get("default", [0, 0])
        return default[1] > 0 and all(exact == total for exact, total in self.by_mode.values())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mismatches": self.mismatches[:20], "holds": self.holds}


def mode_name(mode: dict[str, Any]) -> str:
    """A thinking mode's name in a report: its kwargs, or ``default``."""
    return ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(mode.items())) or "default"


# Conversations without tool calls: every template renders them, whatever it does with tools.
_CHATS = tuple(
    Scenario(name, "chat without tools", messages, (), frozenset({"chat"}))
    for name, messages in (
        ("chat/plain", CHAT),
        ("chat_system/plain", ({"role": "system", "content": "Be brief."}, *CHAT)),
    )
)


def expected_mask(audited: AuditedTemplate, renderer: Any, messages: list[Message], tools: Any) -> list[int] | None:
    """1 on the tokens of the full render that the model sampled: each assistant turn from the end of its
    generation prompt through its stop token (derived as the simulator derives sampled ids); None when a turn's
    render is not a prefix of the full render (the template rewrites history, so there is no one answer)."""
    from tito_audit.audit.simulation import derive_turn

    full = renderer.render(messages, tools=tools)
    _, offsets = renderer.encode_with_offsets(full)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        turn = derive_turn(renderer, messages, i, tools, audited.stop_ids)
        start = len(turn.history_before)
        if not turn.stop_rendered:
            return None
        stop = audited.model.tokenizer.decode([turn.stop_id], skip_special_tokens=False)
        end = start + turn.completion_text.index(stop) + len(stop)
        text = (turn.history_before + turn.completion_text)[:end]
        if not full.startswith(text):
            return None
        spans.append((start, end))
    return [1 if any(s <= a and b <= e for s, e in spans) and b > a else 0 for a, b in offsets]


def mask_proof(audited: AuditedTemplate, patched: str) -> MaskProof:
    """``return_assistant_tokens_mask`` against the sampled spans, episode by episode and mode by mode."""
    from tito_audit.scenarios import build_scenarios

    proof = MaskProof()
    base = audited.renderer(patched)
    built = build_scenarios(special_token_strings(audited.model.tokenizer), audited.thinking_modes)
    plain = [*_CHATS, *(s for s in built if s.id.endswith("/plain") and "thinking" not in s.tags)]
    scenarios = [s for s in built if "thinking" in s.tags and "special_text" not in s.tags] + plain
    for mode in audited.thinking_modes:
        if mode:  # answers without reasoning, played in every thinking mode too
            suffix = "".join(f"[{k}={json.dumps(v)}]" for k, v in sorted(mode.items()))
            scenarios += [replace(s, id=s.id + suffix, template_kwargs=tuple(sorted(mode.items()))) for s in plain]
    for scenario in scenarios:
        from tito_audit.audit.simulation import adapt_to_template

        renderer = base.with_kwargs(**scenario.kwargs) if scenario.kwargs else base
        messages, _, err = adapt_to_template(renderer, scenario)
        tools = list(scenario.tools) or None
        try:
            if err is not None:
                raise err
            expected = expected_mask(audited, renderer, messages, tools)
            ids, mask = renderer.render_with_mask(messages, tools=tools)
        except RenderError:
            expected = None
        if expected is None or len(expected) != len(ids):
            proof.not_comparable += 1
            continue
        proof.episodes += 1
        counts = proof.by_mode.setdefault(mode_name(scenario.kwargs), [0, 0])
        counts[1] += 1
        if mask == expected:
            proof.exact += 1
            counts[0] += 1
            continue
        at = next(i for i in range(len(ids)) if mask[i] != expected[i])
        piece = audited.model.tokenizer.decode([ids[at]], skip_special_tokens=False)
        proof.mismatches.append(
            f"{scenario.id}: token {at} ({piece!r}) is {'in' if mask[at] else 'outside'} the mask, "
            f"{'outside' if mask[at] else 'in'} the sampled span"
        )
    return proof


def mask_reasons(masks: MaskProof | None) -> list[str]:
    """Why the generation markers' assistant mask is not proven: it differs from the sampled span in a mode, or
    no episode of the default mode could be compared."""
    if masks is None or masks.holds:
        return []
    reasons: list[str] = []
    wrong = [(mode, exact, total) for mode, (exact, total) in masks.by_mode.items() if exact < total]
    if not wrong:
        reasons.append("assistant mask: no comparable episode in the default mode")
    for mode, exact, total in wrong:
        example = next((m for m in masks.mismatches if mode == "default" or mode in m), "")
        reasons.append(
            f"assistant mask differs from the sampled span in mode {mode}: exact in {exact} of {total} "
            f"episodes ({example})"
        )
    return reasons
