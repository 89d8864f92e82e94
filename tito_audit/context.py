"""Everything a check may look at for one model, computed once and shared between checks."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from tito_audit.rendering.analysis import loaded_names, template_variables
from tito_audit.rendering.guard import RenderLimits
from tito_audit.rendering.renderer import DEFAULT_DATE, Renderer, RenderError, tokenizer_cache
from tito_audit.rollout.simulate import Simulation, simulate
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import common_prefix_len, special_token_strings
from tito_audit.scenarios import Scenario, build_scenarios
from tito_audit.scenarios.adapt import Shapes, probe_shapes
from tito_audit.scenarios.catalog import TOOLS
from tito_audit.sources.load import LoadedModel

if TYPE_CHECKING:  # the check modules import this one: importing them here would be circular
    from tito_audit.checks.base import Finding, TokenSide

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
    scenarios: str = "full"  # "full" (the whole catalog) | "quick" (QUICK_SCENARIOS: a documented subset for scans)

    def __post_init__(self) -> None:
        if self.scenarios not in SCENARIO_SETS:
            raise ValueError(f"scenarios must be one of {', '.join(SCENARIO_SETS)}, not {self.scenarios!r}")


# ``--scenarios quick``: every conversation shape once with plain text, plus the variants that specific checks
# read (control-token text, JSON booleans, multi-byte text, whitespace) and string arguments (which some
# templates require). Every check still runs; fewer content variants means fewer chances to catch a break, so a
# quick verdict can be milder than the full one.
QUICK_SCENARIOS: tuple[str, ...] = (
    "single_call/plain",
    "two_calls/plain",
    "parallel_calls/plain",
    "system_single_call/plain",
    "followup_user/plain",
    "system_notice/plain",
    "content_null/plain",
    "reasoning/plain",
    "reasoning_followup/plain",
    "inline_think/plain",
    "single_call/special_text",
    "single_call/booleans",
    "single_call/whitespace",
    "two_calls/cjk",
    "single_call/args_string",
    "two_calls/args_string",
)
SCENARIO_SETS: dict[str, tuple[str, ...] | None] = {"full": None, "quick": QUICK_SCENARIOS}


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
        return template_variables(self.model.chat_template)

    @cached_property
    def thinking_switches(self) -> list[str]:
        """Reasoning kwargs the template really treats as on/off switches (both values render, one differs)."""
        source = self.model.chat_template.lower()
        if not any(w in source for w in _THINKING_WORDS):
            return []  # no variable name can contain a word the source lacks (spares a template analysis)
        probe = [{"role": "user", "content": "Hi"}]
        switches = []
        # Candidates: every name the template reads, a superset of its undeclared variables that is cheaper to get.
        # A name that changes the render when passed in is read from the context, so probing finds the same ones.
        for name in thinking_kwargs(loaded_names(self.model.chat_template)):
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
        """Control-token texts, those the template itself writes first: forging them is what hurts."""
        texts = [t for t in special_token_strings(self.tokenizer) if t not in self.model.hidden_specials]
        template = self.model.chat_template or ""
        return sorted(texts, key=lambda t: t not in template)

    @cached_property
    def shapes(self) -> Shapes:
        """The conversation shapes this template accepts (probed once; every scenario is played in them)."""
        return probe_shapes(self.renderer, list(TOOLS))

    @cached_property
    def scenarios(self) -> list[Scenario]:
        return build_scenarios(self.special_texts, self.thinking_modes, only=SCENARIO_SETS[self.options.scenarios])

    def simulation(self, scenario: Scenario) -> Simulation:
        sim = self._simulations.get(scenario.id)
        if sim is None:
            sim = simulate(self.renderer, scenario, self.stop_ids, self.shapes)
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
        from tito_audit.checks.base import TokenSide

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
        from tito_audit.checks.base import Finding

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


_NUMPY_CELLS = 40_000  # ranges at least this large (len(a) * len(b)) are searched with numpy
_HASH_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64


class IdMatcher(difflib.SequenceMatcher[int]):
    """``SequenceMatcher(autojunk=False)`` over id lists: the same blocks, found without difflib's quadratic search.

    difflib's longest-match search costs one dict operation per pair of equal ids, quadratic on long renders full of
    repeated ids (newlines, digits). Here the length of the longest common run is found by rolling hashes over
    numpy arrays (does a common window of length k exist? galloping up from the common prefix or suffix, which
    already is one), and the block returned is the one difflib returns: longest, then earliest in ``a``, then
    earliest in ``b``. Every hash hit is checked on the ids themselves, so a collision cannot change the answer.
    Junk handling, and small ranges, are difflib's own.
    """

    def __init__(self, a: Sequence[int], b: Sequence[int]) -> None:
        self._ids = (list(a), list(b))
        super().__init__(None, self._ids[0], self._ids[1], autojunk=False)
        self._arrays: tuple[Any, Any] | None = None

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        ahi = len(self._ids[0]) if ahi is None else ahi
        bhi = len(self._ids[1]) if bhi is None else bhi
        junk = getattr(self, "bjunk", None) or getattr(self, "bpopular", None)
        if junk or (ahi - alo) * (bhi - blo) < _NUMPY_CELLS or ahi <= alo or bhi <= blo:
            return super().find_longest_match(alo, ahi, blo, bhi)
        import numpy as np

        if self._arrays is None:
            self._arrays = (np.asarray(self._ids[0], dtype=np.uint64), np.asarray(self._ids[1], dtype=np.uint64))
        a, b = self._arrays[0][alo:ahi], self._arrays[1][blo:bhi]
        n = min(len(a), len(b))
        same = np.flatnonzero(a[:n] != b[:n])
        prefix = int(same[0]) if same.size else n
        tail = np.flatnonzero(a[len(a) - n :][::-1] != b[len(b) - n :][::-1])
        suffix = int(tail[0]) if tail.size else n
        windows = _Windows(np, a, b)
        best = max(prefix, suffix)  # a common run of this length exists
        if best < n and windows.first(best + 1) is not None:  # gallop, then bisect, to the longest length
            lo, step = best + 1, 1
            while lo + step <= n and windows.first(lo + step) is not None:
                lo, step = lo + step, step * 2
            hi = min(n + 1, lo + step)  # a run of length lo exists, of length hi does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if windows.first(mid) is not None else (lo, mid)
            best = lo
        if best == 0:
            return difflib.Match(alo, blo, 0)
        hit = windows.first(best)
        assert hit is not None
        return difflib.Match(alo + hit[0], blo + hit[1], best)


class _Windows:
    """Rolling hashes of every window of one length in two id arrays (arithmetic wraps modulo 2**64)."""

    def __init__(self, np: Any, a: Any, b: Any) -> None:
        self.np, self.a, self.b = np, a, b
        size = max(len(a), len(b)) + 1
        with np.errstate(over="ignore"):
            base = np.full(size, _HASH_BASE, dtype=np.uint64)
            base[0] = 1
            self.powers = np.cumprod(base, dtype=np.uint64)
            inverse = np.full(size, pow(_HASH_BASE, -1, 2**64), dtype=np.uint64)
            inverse[0] = 1
            self.inverses = np.cumprod(inverse, dtype=np.uint64)
            self.sums = (self._prefix_sums(a), self._prefix_sums(b))

    def _prefix_sums(self, x: Any) -> Any:
        np = self.np
        out = np.zeros(len(x) + 1, dtype=np.uint64)
        with np.errstate(over="ignore"):
            np.cumsum((x + np.uint64(1)) * self.powers[: len(x)], dtype=np.uint64, out=out[1:])
        return out

    def _hashes(self, which: int, k: int) -> Any:
        sums = self.sums[which]
        count = len(sums) - k
        with self.np.errstate(over="ignore"):
            return (sums[k:] - sums[:count]) * self.inverses[:count]

    def first(self, k: int) -> tuple[int, int] | None:
        """The common window of length ``k`` that starts earliest in ``a``, then in ``b``; None if there is none."""
        np = self.np
        if k <= 0 or k > len(self.a) or k > len(self.b):
            return None
        ha, hb = self._hashes(0, k), self._hashes(1, k)
        for i in np.flatnonzero(np.isin(ha, hb)):
            window = self.a[i : i + k]
            for j in np.flatnonzero(hb == ha[i]):
                if np.array_equal(window, self.b[j : j + k]):
                    return int(i), int(j)
        return None


def count_unmatched_trainable(expected: Sequence[int], actual: Sequence[int], trainable: Sequence[int]) -> int:
    """Trainable positions of ``expected`` that an alignment with ``actual`` cannot match."""
    matcher = IdMatcher(expected, actual)
    matched = [False] * len(expected)
    for block in matcher.get_matching_blocks():
        for i in range(block.a, block.a + block.size):
            matched[i] = True
    return sum(1 for i, t in enumerate(trainable) if t and i < len(matched) and not matched[i])
