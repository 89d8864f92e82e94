"""Everything a check may look at for one model, computed once and shared between checks."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tito_audit.checks.base import Finding, TokenSide
from tito_audit.rendering.guard import RenderLimits
from tito_audit.rendering.renderer import DEFAULT_DATE, Renderer, RenderError
from tito_audit.rollout.simulate import Simulation, simulate
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import common_prefix_len, special_token_strings
from tito_audit.scenarios import Scenario, build_scenarios
from tito_audit.sources.load import LoadedModel

CONTEXT_TOKENS = 4
_THINKING_WORDS = ("think", "reason")


@dataclass(frozen=True)
class AuditOptions:
    date: dt.datetime = DEFAULT_DATE
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    thinking: str = "both"  # "on" | "off" | "both" | "default"
    only_checks: tuple[str, ...] = ()
    limits: RenderLimits = field(default_factory=RenderLimits)
    debug: bool = False


def thinking_kwargs(template_variables: frozenset[str]) -> list[str]:
    """Template variables that switch reasoning on or off (``enable_thinking``, ``thinking``...)."""
    ignore = {"reasoning_content", "thinking", "messages", "message"}
    names = [v for v in template_variables if any(w in v.lower() for w in _THINKING_WORDS) and v not in ignore]
    # ``thinking`` is both a message field and, in some templates, a switch; keep it only as a global.
    return sorted(names)


class AuditContext:
    def __init__(self, model: LoadedModel, options: AuditOptions) -> None:
        self.model = model
        self.options = options
        self.tokenizer = model.tokenizer
        self.renderer = Renderer(
            model.tokenizer, model.chat_template, options.template_kwargs, options.date, options.limits
        )
        self._simulations: dict[str, Simulation] = {}

    @cached_property
    def template_variables(self) -> frozenset[str]:
        from transformers.utils.chat_template_utils import _get_template_variables

        return frozenset(_get_template_variables(self.model.chat_template))

    @cached_property
    def thinking_switches(self) -> list[str]:
        """Reasoning kwargs the template really treats as on/off switches (both values render, one differs)."""
        probe = [{"role": "user", "content": "Hi"}]
        switches = []
        for name in thinking_kwargs(self.template_variables):
            if name in self.options.template_kwargs:
                continue
            try:
                default = self.renderer.render(probe, add_generation_prompt=True)
                on = self.renderer.with_kwargs(**{name: True}).render(probe, add_generation_prompt=True)
                off = self.renderer.with_kwargs(**{name: False}).render(probe, add_generation_prompt=True)
            except RenderError:
                continue
            if len({default, on, off}) > 1:
                switches.append(name)
        return switches

    @cached_property
    def thinking_modes(self) -> list[dict[str, Any]]:
        """Template kwargs to play reasoning scenarios under: default, and each switch on / off."""
        if self.options.thinking == "default" or not self.thinking_switches:
            return [{}]
        values = {"on": [True], "off": [False], "both": [True, False]}[self.options.thinking]
        modes: list[dict[str, Any]] = [{}] if self.options.thinking == "both" else []
        modes += [{k: v} for k in self.thinking_switches for v in values]
        return modes

    @cached_property
    def stop_ids(self) -> tuple[int, ...]:
        return stop_token_ids(self.tokenizer, self.renderer, self.model.generation_eos_ids)

    @cached_property
    def vocab(self) -> dict[str, int]:
        return dict(self.tokenizer.get_vocab())

    @cached_property
    def special_ids(self) -> set[int]:
        return set(self.tokenizer.all_special_ids)

    @cached_property
    def special_texts(self) -> list[str]:
        return special_token_strings(self.tokenizer)

    @cached_property
    def scenarios(self) -> list[Scenario]:
        return build_scenarios(self.special_texts, self.thinking_modes)

    def simulation(self, scenario: Scenario) -> Simulation:
        sim = self._simulations.get(scenario.id)
        if sim is None:
            sim = simulate(self.renderer, scenario, self.stop_ids)
            self._simulations[scenario.id] = sim
        return sim

    @cached_property
    def simulations(self) -> list[Simulation]:
        return [self.simulation(s) for s in self.scenarios]

    def ok_simulations(self, exclude_tags: Sequence[str] = ()) -> list[Simulation]:
        return [s for s in self.simulations if s.ok and not (set(exclude_tags) & s.scenario.tags)]

    def renderer_for(self, scenario: Scenario) -> Renderer:
        return self.renderer.with_kwargs(**scenario.kwargs) if scenario.kwargs else self.renderer

    # -- building findings -------------------------------------------------------------------------

    def window(self, ids: Sequence[int], index: int) -> tuple[int, TokenSide]:
        start = max(0, index - CONTEXT_TOKENS)
        chunk = list(ids[start : index + CONTEXT_TOKENS + 1])
        return start, TokenSide(chunk, self.renderer.token_texts(chunk))

    def divergence(
        self,
        check: str,
        scenario: str,
        expected: Sequence[int],
        actual: Sequence[int],
        message: str,
        cls: str | None = None,
        trainable: Sequence[int] | None = None,
    ) -> Finding | None:
        """A finding at the first token where ``actual`` departs from ``expected``; None when equal."""
        if list(expected) == list(actual):
            return None
        index = common_prefix_len(expected, actual)
        start, exp_side = self.window(expected, index)
        _, act_side = self.window(actual, index)
        affected = 0
        if trainable is not None:
            affected = count_unmatched_trainable(expected, actual, trainable)
        return Finding(
            check=check,
            scenario=scenario,
            cls=cls or self.classify(expected[index : index + 8], actual[index : index + 8]),
            message=message,
            index=index,
            context_start=start,
            expected=exp_side,
            actual=act_side,
            affected_trainable=affected,
        )

    def classify(self, a: Sequence[int], b: Sequence[int]) -> str:
        """Name the cause of a divergence from the tokens on both sides."""
        ta, tb = self.renderer.decode(a), self.renderer.decode(b)
        stops = set(self.stop_ids)
        if "think" in ta + tb or "reasoning" in ta + tb or "analysis" in ta + tb:
            return "history_rewrite"
        if (a and a[0] in stops) or (b and b[0] in stops):
            return "stop_seam"
        if ta.strip() == tb.strip() or (ta[:1].isspace() or tb[:1].isspace()):
            return "whitespace"
        specials = set(self.special_texts)
        if any(s in ta or s in tb for s in specials):
            return "special_token"
        if any(c in ta + tb for c in '{}":,[]'):
            return "serialization"
        return "history_rewrite"


def count_unmatched_trainable(expected: Sequence[int], actual: Sequence[int], trainable: Sequence[int]) -> int:
    """Trainable positions of ``expected`` that an alignment with ``actual`` cannot match."""
    matcher = difflib.SequenceMatcher(a=list(expected), b=list(actual), autojunk=False)
    matched = [False] * len(expected)
    for block in matcher.get_matching_blocks():
        for i in range(block.a, block.a + block.size):
            matched[i] = True
    return sum(1 for i, t in enumerate(trainable) if t and i < len(matched) and not matched[i])
