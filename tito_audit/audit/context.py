"""``AuditContext``: everything a check may look at for one model, computed once and shared between checks.

Findings are built in ``tito_audit.audit.collector``, ids aligned in ``tito_audit.report.align``, the scenario
sets named in ``tito_audit.scenarios.catalog``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from tito_audit.audit.simulation import Simulation, simulate
from tito_audit.engines.base import Engine
from tito_audit.engines.resolve import engine_for
from tito_audit.engines.seam import PROBES
from tito_audit.errors import InternalError, RenderError, RendererUnavailable, detached
from tito_audit.rendering.analysis import (
    loaded_names,
    message_reads,
    template_literals,
    template_switches,
    template_variables,
)
from tito_audit.rendering.clock import DEFAULT_DATE
from tito_audit.rendering.guard import AUDIT_LIMITS, RenderLimits
from tito_audit.rendering.renderer import Renderer
from tito_audit.rendering.tokenizer_cache import tokenizer_cache
from tito_audit.report.finding_class import ReasoningMarks
from tito_audit.rollout.probes import TOOLS
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import special_token_strings
from tito_audit.scenarios import Scenario, build_scenarios
from tito_audit.scenarios.adapt import tools_as_read
from tito_audit.scenarios.catalog import REASONING_TEXTS, SCENARIO_SETS
from tito_audit.scenarios.derived import derived_scenarios, wide_scenarios
from tito_audit.scenarios.reach import Reach, derive_reach
from tito_audit.scenarios.reasoning import delimiter_pairs, reasoning_marks
from tito_audit.scenarios.searched import Conversation
from tito_audit.scenarios.shapes import Shapes, probe_shapes
from tito_audit.scenarios.switches import Switches, candidate_switches, playable, switch_scenarios
from tito_audit.sources.load import LoadedModel

SEARCH_BUDGET = 40  # conversations the counterexample search draws by default (``--search``; 0: off)
_THINKING_WORDS = ("think", "reason")
THINKING = ("on", "off", "both", "unset")  # AuditOptions.thinking (``--thinking`` of audit and rl)


@dataclass(frozen=True)
class AuditOptions:
    date: dt.datetime = DEFAULT_DATE
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    # "both": the template's default mode, then each reasoning switch on and off; "on" / "off": each switch so;
    # "unset": the template's default mode only ("default", its old name, is read the same)
    thinking: str = "both"
    only_checks: tuple[str, ...] = ()
    limits: RenderLimits = AUDIT_LIMITS  # per render, and the per-template budget (``rendering.budget``)
    debug: bool = False
    scenarios: str = "full"  # "full" (the whole catalog) | "quick" (QUICK_SCENARIOS: a documented subset for scans)
    # Count the sampled tokens each naive re-tokenization finding loses (an alignment of the two sequences, the
    # costliest part of a finding). The scan, which keeps the verdict and no finding, turns it off.
    count_lost_tokens: bool = True
    # What the engine renders with (``tito_audit.engines``; None: the model's Jinja template), and what the trainer
    # re-renders with (None: no engine/trainer pair to compare).
    renderer: str | None = None
    train_renderer: str | None = None
    # The counterexample search (``audit.search``): conversations drawn (0: off), and its seed.
    search: int = SEARCH_BUDGET
    search_seed: int = 0
    # Counterexamples another audit found (``scenarios.search.counterexamples`` of its report: messages, tools,
    # template_kwargs), played here as scenarios ``search/replayed-N``: ``fix`` proves a patch on them too.
    counterexamples: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.scenarios not in SCENARIO_SETS:
            raise ValueError(f"scenarios must be one of {', '.join(SCENARIO_SETS)}, not {self.scenarios!r}")
        if self.thinking not in (*THINKING, "default"):
            raise ValueError(f"thinking must be one of {', '.join(THINKING)}, not {self.thinking!r}")
        if self.search < 0:
            raise ValueError(f"search must be 0 (off) or a number of conversations, not {self.search}")


def thinking_kwargs(template_variables: frozenset[str]) -> list[str]:
    """Template variables that may switch reasoning on or off (``enable_thinking``, ``thinking``...): candidates,
    each probed. ``thinking`` is a message field in some templates and the switch in others (DeepSeek V3.1, Kimi
    K2.5): the probe tells them apart (a name that changes no render when passed in is no switch)."""
    ignore = {"reasoning_content", "messages", "message"}
    names = [v for v in template_variables if any(w in v.lower() for w in _THINKING_WORDS) and v not in ignore]
    return sorted(names)


def _taken_by_a_side(model: str, name: str, value: Any, sides: Sequence[Engine]) -> None:
    """``RendererUnavailable`` when no renderer of the audit takes option ``name`` (a typo, an option of another
    renderer): it would change nothing, or make every render refused."""
    if any(side.takes_option(name, value) for side in sides):
        return
    why = []
    for side in sides:
        if not side.options_enumerable:
            why.append(f"{side.name} takes **kwargs, and {name} is neither named in its code nor changes a render")
        else:
            why.append(f"{side.name} takes {', '.join(sorted(side.option_names)) or 'none'}")
    raise RendererUnavailable(model, f"no renderer takes option {name} ({'; '.join(why)})")


class AuditContext:
    def __init__(self, model: LoadedModel, options: AuditOptions) -> None:
        # The engine renders every scenario (the model's template unless ``--renderer`` names another renderer); a
        # trainer named with ``--train-renderer`` re-renders them for the pair comparison (``engines.pair``).
        self.engine = engine_for(options.renderer, model, options.limits)
        self.trainer = engine_for(options.train_renderer, model, options.limits) if options.train_renderer else None
        sides = [self.engine] if self.trainer is None else [self.engine, self.trainer]
        for name, value in options.template_kwargs.items():  # each side is given the options it takes
            _taken_by_a_side(model.name, name, value, sides)
        if not self.engine.is_template:  # the template is not what renders: nothing may read its source
            model = model.with_renderer(self.engine.info.identity())
        self.model = model
        self.options = options
        self.tokenizer = model.tokenizer
        # A template that rejects tools in the OpenAI schema is given them in the first schema it reads
        # (``scenarios.adapt.TOOL_SCHEMAS``: an adaptation the rollout code must make too); other renderers take
        # the tools as they are. Both sides render as a loop that calls ``apply_chat_template`` as usual does (no
        # control-token marking): the verdict's path; ``marked_simulation`` plays a scenario as a marking loop
        # would, for ``control_marking``.
        engine = self.engine.renderer(model.tokenizer, options.template_kwargs, options.date, options.limits)
        self.renderer: Renderer = self._tools_as_read(self.engine, engine.with_marking(False))
        self.trainer_renderer: Renderer | None = None
        if self.trainer is not None:
            trainer = self.trainer.renderer(model.tokenizer, options.template_kwargs, options.date, options.limits)
            self.trainer_renderer = self._tools_as_read(self.trainer, trainer.with_marking(False))
        self._simulations: dict[str, Simulation] = {}
        self._marked: dict[str, Simulation] = {}
        self.not_probed_thinking: list[str] = []  # why a reasoning switch could not be probed (``thinking_switches``)

    @staticmethod
    def _tools_as_read(engine: Any, renderer: Renderer) -> Renderer:
        return tools_as_read(renderer, list(TOOLS)) if engine.is_template else renderer

    @cached_property
    def template_variables(self) -> frozenset[str]:
        return template_variables(self.model.chat_template)

    @cached_property
    def thinking_switches(self) -> dict[str, tuple[Any, ...]]:
        """Reasoning options the template (or the engine) really treats as switches, each with the values it is
        played at: for a template, on and off (both values render, one differs); for an engine, the values its
        library declares or, where it declares none, those of its code's string constants that render differently
        (``Engine.code_values``). What could not be probed is in ``not_probed_thinking``."""
        if self.engine.is_template:
            source = self.model.chat_template.lower()
            if not any(w in source for w in _THINKING_WORDS):
                return {}  # no variable name can contain a word the source lacks (spares a template analysis)
            # Candidates: every name the template reads, a superset of its undeclared variables that is cheaper to
            # get. A name that changes the render when passed in is read from the context, so probing finds the
            # same ones.
            candidates = thinking_kwargs(loaded_names(self.model.chat_template))
            probes = PROBES[:1]
        else:
            candidates = thinking_kwargs(self.engine.option_names)
            probes = PROBES
        switches: dict[str, tuple[Any, ...]] = {}
        for name in candidates:
            if name in self.options.template_kwargs:
                continue
            declared = (True, False) if self.engine.is_template else self.engine.option_values(name)
            values = declared if declared is not None else self.engine.code_values(name)
            played = self._switch_values(name, values, probes)
            if not played and self.engine.is_template:  # one that rewrites only what reasoning an answer holds
                played = self._switch_values(name, values, (self._reasoning_probe,))
            if played:
                switches[name] = played
            elif declared is None:
                self.not_probed_thinking.append(
                    f"{name}: its values are not declared, and none of {len(values)} tried (booleans and the string "
                    "constants of its code) changes a render"
                )
        if not self.engine.is_template and not self.engine.options_enumerable:
            found = ", ".join(switches) or "none"
            self.not_probed_thinking.append(
                f"{self.engine.name} takes **kwargs: its options cannot be enumerated (switches looked for among the "
                f"names its code mentions; found: {found})"
            )
        return switches

    @cached_property
    def _reasoning_probe(self) -> tuple[tuple[dict[str, Any], ...], bool]:
        """A probe whose earlier answer holds reasoning both ways a template may read it: in ``reasoning_content``,
        and inline in its content between the first delimiter pair the template tests text with (``<think>`` where
        it tests none). A switch that strips or keeps only that (red team 50: ``enable_thinking`` splitting every
        answer at ``</think>``) changes no render of a conversation without reasoning, and was never played."""
        pairs = delimiter_pairs(message_reads(self.model.chat_template).tested_literals, self.model.chat_template)
        opener, closer = pairs[0] if pairs else ("<think>", "</think>")
        answer = {
            "role": "assistant",
            "content": f"{opener}\nGreet back.\n{closer}\n\nHello.",
            "reasoning_content": "Greet back.",
        }
        return ({"role": "user", "content": "Hi"}, answer, {"role": "user", "content": "Again"}), True

    def _switch_values(self, name: str, values: Sequence[Any], probes: Sequence[Any]) -> tuple[Any, ...]:
        """The values of ``name`` to play: on and off where it is a boolean switch and one of them changes a probe
        render; otherwise each value that renders and changes a probe render, one per distinct set of renders."""

        def renders(kwargs: dict[str, Any]) -> tuple[str, ...] | None:
            renderer = self.renderer.with_kwargs(**kwargs) if kwargs else self.renderer
            try:
                return tuple(renderer.render(list(m), add_generation_prompt=agp) for m, agp in probes)
            except RenderError:
                return None

        default = renders({})
        if default is None:
            return ()
        if set(values) == {True, False} and all(isinstance(v, bool) for v in values):
            seen = {renders({name: True}), renders({name: False})}
            return (True, False) if None not in seen and seen != {default} else ()
        kept: dict[tuple[str, ...], Any] = {}
        for value in values:
            out = renders({name: value})
            if out is not None and out != default:
                kept.setdefault(out, value)
        return tuple(kept.values())

    @cached_property
    def thinking_modes(self) -> list[dict[str, Any]]:
        """Template kwargs to play reasoning scenarios under: default, and each switch on / off (a switch's other
        values than on and off: at each of them, whatever ``--thinking`` says but ``unset``)."""
        if self.options.thinking in ("unset", "default") or not self.thinking_switches:
            return [{}]
        on_off = {"on": [True], "off": [False], "both": [True, False]}[self.options.thinking]
        modes: list[dict[str, Any]] = [{}] if self.options.thinking == "both" else []
        for name, values in self.thinking_switches.items():
            modes += [{name: v} for v in values if not isinstance(v, bool) or v in on_off]
        return modes

    @cached_property
    def not_probed(self) -> list[str]:
        """What the verdict does not cover (``not_probed:WHAT`` reasons): ``thinking_modes`` where a reasoning switch
        could not be enumerated or its values could not be found (``not_probed_thinking`` says which); what the
        template tests past every derived scenario's reach (``reach``: ``count:N``, ``length:N``, ``literal:TEXT``);
        a derived scenario the template refused (``switch:NAME=VALUE``, ``scenario:ID``); a thinking mode in which it
        refused every scenario (``mode:NAME=VALUE``)."""
        reach = [*self.reach.not_probed, *self.switches.not_probed, *self._derived_not_played()]
        reach += self._modes_not_played()
        if self.options.thinking in ("unset", "default"):
            return reach
        _ = self.thinking_switches
        return ["thinking_modes", *reach] if self.not_probed_thinking else reach

    def _modes_not_played(self) -> list[str]:
        """A thinking mode (other than the default) in which the template refused every scenario played under it
        (``mode:NAME=VALUE``): the mode is in the report's modes, and nothing was judged in it."""
        modes = {tuple(sorted(m.items())) for m in self.thinking_modes if m}
        tried: dict[tuple[tuple[str, Any], ...], bool] = {}
        for s in self._simulations.values():
            mode = s.scenario.template_kwargs
            if mode in modes and "derived" not in s.scenario.tags:  # a switch's derived scenario is named apart
                tried[mode] = tried.get(mode, False) or s.error is None
        return [
            "mode:" + ",".join(f"{k}={json.dumps(v)}" for k, v in mode) for mode, played in tried.items() if not played
        ]

    def _derived_not_played(self) -> list[str]:
        """A scenario derived from what the template reads that it refused (the reading is then not exercised):
        ``switch:NAME=VALUE`` for a switch's (its probe rendered, the episode not), ``scenario:ID`` for the others
        (``wide/13``, ``long/10``...)."""
        return [
            f"switch:{s.scenario.id.removeprefix('switch/')}"
            if "switch" in s.scenario.tags
            else f"scenario:{s.scenario.id}"
            for s in self._simulations.values()
            if "derived" in s.scenario.tags and s.error is not None
        ]

    @cached_property
    def switches(self) -> Switches:
        """The template's switches (``scenarios.switches``: the context variables it compares or tests, other than
        the reasoning switches ``thinking_modes`` plays and the kwargs given) and the values each is played at:
        those a probe renders under."""
        template = self.model.chat_template
        if not self.engine.is_template or not template:
            return Switches()
        read = template_switches(template)
        if not read:
            return Switches()
        skip = {*self.options.template_kwargs, *self.thinking_switches, *self.tokenizer.special_tokens_map}
        candidates = candidate_switches(read, loaded_names(template), skip)
        if not candidates:
            return Switches()
        messages, agp = PROBES[0]

        def renders(kwargs: dict[str, Any]) -> bool:
            try:
                self.renderer.with_kwargs(**kwargs).render(list(messages), add_generation_prompt=agp)
            except RenderError:
                return False
            return True

        return playable(candidates, renders)

    def renderer_report(self, engine: Engine, renderer: Renderer) -> dict[str, Any]:
        """What the report says about one side: the engine's identity and how it really rendered, and ``notes``:
        options it was not given, switches it could not be probed for."""
        notes = [f"not given option {name}: {why}" for name, why in getattr(renderer, "not_given", {}).items()]
        if engine is self.engine:
            notes += [f"thinking modes not probed: {why}" for why in self.not_probed_thinking]
        out = engine.report()
        if notes:
            out["notes"] = notes
        return out

    @cached_property
    def stop_ids(self) -> tuple[int, ...]:
        """The engine's stop ids: those its library declares, else derived from the renders."""
        return self.engine.stop_ids() or stop_token_ids(self.tokenizer, self.renderer, self.model.generation_eos_ids)

    @cached_property
    def vocab(self) -> Mapping[str, int]:
        """The vocabulary, built once per tokenizer (shared: read it, never change it)."""
        return tokenizer_cache(self.tokenizer).vocab

    @cached_property
    def special_ids(self) -> set[int]:
        """Control tokens: the named specials and every added token flagged special (``<|im_end|>``...)."""
        memo = tokenizer_cache(self.tokenizer).memo  # a property of the tokenizer: computed once per tokenizer
        if "special_ids" not in memo:
            decoder = getattr(self.tokenizer, "added_tokens_decoder", {}) or {}
            specials = set(self.tokenizer.all_special_ids)
            memo["special_ids"] = frozenset(specials | {i for i, t in decoder.items() if getattr(t, "special", False)})
        return set(memo["special_ids"])

    @cached_property
    def special_texts(self) -> list[str]:
        """Control-token texts, those the template (or the engine, in its renders of the probes) itself writes
        first: forging them is what hurts."""
        texts = [t for t in special_token_strings(self.tokenizer) if t not in self.model.hidden_specials]
        written = self.model.chat_template or ""
        if not self.engine.is_template:
            rendered = []
            for messages, agp in PROBES:
                try:
                    rendered.append(self.renderer.render(list(messages), add_generation_prompt=agp))
                except RenderError:
                    continue
            written = "\n".join(rendered)
        return sorted(texts, key=lambda t: t not in written)

    @cached_property
    def shapes(self) -> Shapes:
        """The conversation shapes this template accepts (probed once; every scenario is played in them). Reasoning's
        form is looked for under the thinking modes and under each switch value played (``switches``): a switch
        named otherwise may be what strips reasoning (red team 50: ``reasoning_mode == 'hide'``)."""
        modes = [*self.thinking_modes, *({name: value} for name, value in self.switches.played)]
        return probe_shapes(self.renderer, list(TOOLS), modes)

    @cached_property
    def reasoning_marks(self) -> ReasoningMarks:
        """What reasoning looks like here, for finding classes: the template's own reasoning delimiters (none that is a
        stop token: it ends every turn) and the reasoning texts scenarios send, where reasoning reaches the render."""
        reasoning = self.shapes.reasoning
        if not reasoning.mode:
            return ReasoningMarks()
        stops = self.tokenizer.convert_ids_to_tokens(list(self.stop_ids))
        marks = reasoning_marks(self.model.chat_template, None, reasoning, stops)
        return ReasoningMarks(marks.delimiters, REASONING_TEXTS)

    @cached_property
    def scenarios(self) -> list[Scenario]:
        """The catalog's scenarios, then those derived from what this template reads (``derived_scenarios``), its
        switches played, its wide calls (``wide_scenarios``), and the counterexamples given to replay."""
        catalog = build_scenarios(self.special_texts, self.thinking_modes, only=SCENARIO_SETS[self.options.scenarios])
        derived = derived_scenarios(self.shapes.reasoning, self.special_texts, self.thinking_modes, self.reach)
        switched: list[Scenario] = []
        if self.switches.played:  # each switch value in the reasoning follow-up episode (``scenarios.switches``)
            base = build_scenarios(self.special_texts, [{}], only=("reasoning_followup/plain",))
            switched = switch_scenarios(self.switches, base[0])
        replayed = [
            Conversation.from_dict(c).scenario(f"search/replayed-{n}")
            for n, c in enumerate(self.options.counterexamples, 1)
        ]
        wide = wide_scenarios(self.reach, self.special_texts)
        return [*catalog, *derived, *switched, *wide, *replayed]

    @cached_property
    def reach(self) -> Reach:
        """How far this template's tests reach past the catalogue (``scenarios.reach``): the conversation and text
        lengths it tests and the literals it rewrites text with, played in derived scenarios or named."""
        template = self.model.chat_template
        if not template:
            return Reach()
        reads = message_reads(template)
        pairs = delimiter_pairs(reads.tested_literals, "\n".join(template_literals(template)))
        return derive_reach(reads, [d for pair in pairs for d in pair], self.special_texts)

    def simulation(self, scenario: Scenario) -> Simulation:
        sim = self._simulations.get(scenario.id)
        if sim is None:
            try:
                sim = simulate(self.renderer, scenario, self.stop_ids, self.shapes)
            except InternalError as exc:  # not the template's failure: kept, and raised to every check that reads it
                sim = Simulation(scenario, [], (), internal=detached(exc))
            self._simulations[scenario.id] = sim
        return sim

    def marked_simulation(self, scenario: Scenario) -> Simulation:
        """``scenario`` played as a loop that marks control-token text in the conversation renders it
        (``apply_chat_template(..., sanitize_control_tokens=True)``, ``tito_audit.Trajectory``)."""
        sim = self._marked.get(scenario.id)
        if sim is None:
            try:
                sim = simulate(self.renderer.with_marking(True), scenario, self.stop_ids, self.shapes)
            except InternalError as exc:
                sim = Simulation(scenario, [], (), internal=detached(exc))
            self._marked[scenario.id] = sim
        return sim

    @cached_property
    def simulations(self) -> list[Simulation]:
        return [self.simulation(s) for s in self.scenarios]

    def add_simulations(self, sims: Sequence[Simulation]) -> None:
        """Scenarios played outside the catalogue (the search's counterexamples), judged from now on by every check
        like the others."""
        for sim in sims:
            self._simulations[sim.scenario.id] = sim
            self.scenarios.append(sim.scenario)
            self.simulations.append(sim)

    def ok_simulations(self, exclude_tags: Sequence[str] = ()) -> list[Simulation]:
        """The scenarios that played. Raises ``InternalError`` when one could not be played because of our code or a
        library's (not the template): a check reading them errors instead of judging on fewer scenarios."""
        internal = next((s.internal for s in self.simulations if s.internal is not None), None)
        if internal is not None:
            raise InternalError(internal.message)
        return [s for s in self.simulations if s.ok and not (set(exclude_tags) & s.scenario.tags)]

    def renderer_for(self, scenario: Scenario) -> Renderer:
        return self.renderer.with_kwargs(**scenario.kwargs) if scenario.kwargs else self.renderer
