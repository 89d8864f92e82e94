"""The model under audit, loaded once for the RL loop: renderer, stop ids and the canonical episodes it plays.

Every scenario the template renders is built, in every thinking mode ``audit`` plays (``AuditContext.thinking_modes``
under the same ``--thinking`` and ``-k``), so that the model-free token facts cover them all; ``--scenario`` only
chooses which of them the batches play.
"""

from __future__ import annotations

import json
from typing import Any

from tito_audit.audit.search import counterexample_scenarios
from tito_audit.errors import UsageError
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl.config import RLConfig
from tito_audit.rl.episodes import Episode, FormatCache, canonical_episodes, ending_episodes
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import special_token_strings
from tito_audit.scenarios.catalog import build_scenarios
from tito_audit.sources.load import load

DEFAULT_MODE = "default"


def mode_label(template_kwargs: dict[str, Any]) -> str:
    """``enable_thinking=false``; the template's default mode (no switch passed) is ``default``."""
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(template_kwargs.items())) or DEFAULT_MODE


class TemplateEpisodes:
    """The model under audit as the loop sees it: its tokenizer and renderer, its stop ids, one canonical episode
    per scenario and thinking mode its template renders (``all_episodes``), and those ``--scenario`` selects
    (``episodes``: what the batches play)."""

    def __init__(self, cfg: RLConfig) -> None:
        from tito_audit.audit.context import AuditContext, AuditOptions

        self.loaded = load(cfg.model)
        tok = self.loaded.tokenizer
        self.renderer = Renderer(tok, self.loaded.chat_template, dict(cfg.template_kwargs))
        self.stops = stop_token_ids(tok, self.renderer, self.loaded.generation_eos_ids)
        options = AuditOptions(template_kwargs=dict(cfg.template_kwargs), thinking=cfg.thinking)
        audit = AuditContext(self.loaded, options)  # its thinking modes: those `audit` plays with these options
        self.thinking_switches: list[str] = list(audit.thinking_switches)  # the switch names
        self.thinking_modes: list[dict[str, Any]] = audit.thinking_modes
        scenarios = build_scenarios(special_token_strings(tok)[:4], self.thinking_modes)
        if not cfg.include_injection:
            scenarios = [s for s in scenarios if "special_text" not in s.id]
        # the conversations audit's counterexample search finds (same budget and seed): their facts are the
        # template's too, so no run is "identical" where the search found one
        found, self.search = counterexample_scenarios(audit, cfg.search, cfg.search_seed)
        scenarios += found
        self.filter = tuple(cfg.scenarios)
        if self.filter and not any(self.selected(s.id) for s in scenarios):
            raise UsageError(cfg.model, "no scenario matches --scenario")
        self.formats = FormatCache(self.stops)
        # episodes cut after appended messages whose re-render rewrites the history: token facts, never batches
        self.cut_episodes: list[Episode] = []
        self.all_episodes, self.skipped = canonical_episodes(
            self.renderer, scenarios, self.stops, cfg.noncanonical_rate, cfg.seed, self.formats, self.cut_episodes
        )
        self.episodes = [e for e in self.all_episodes if self.selected(e.scenario_id)]
        if len(self.episodes) < 2:
            which = "of the scenarios --scenario selects" if self.filter else "scenario(s)"
            raise UsageError(cfg.model, f"the template renders only {len(self.episodes)} {which}")
        by_id = {s.id: s for s in scenarios}
        self.mode_of = {s.id: mode_label(dict(s.kwargs)) for s in scenarios}
        self.cut_episodes += ending_episodes(audit, self.stops)
        self.mode_of.update({e.scenario_id: self.mode_of.get(e.cut_of or "", DEFAULT_MODE) for e in self.cut_episodes})
        self.scenarios = [by_id[e.scenario_id] for e in self.episodes]
        self.index = {e.scenario_id: k for k, e in enumerate(self.episodes)}

    def selected(self, scenario_id: str) -> bool:
        """Whether the batches play this scenario (``--scenario`` prefixes; every scenario without a filter)."""
        return not self.filter or any(scenario_id.startswith(p) for p in self.filter)

    def renderer_for(self, scenario_id: str) -> Renderer:
        sc = self.scenarios[self.index[scenario_id]]
        return self.renderer.with_kwargs(**sc.kwargs) if sc.kwargs else self.renderer

    def coverage(self) -> dict[str, Any]:
        """What the token facts and the batches cover: scenarios, thinking modes, template kwargs, the filter."""
        modes = [mode_label(m) for m in self.thinking_modes]
        played, total = len(self.episodes), len(self.all_episodes)
        out = {
            "scenarios": total,
            "played": played,
            "filter": list(self.filter),
            "filtered": f"filtered: {played} of {total} scenarios" if self.filter else None,
            "thinking_switches": list(self.thinking_switches),
            "thinking_modes": modes,
            "template_kwargs": dict(self.renderer.template_kwargs),
            "search": self.search.summary(),
        }
        if self.cut_episodes:  # the token facts hold them too (named, never played by the batches)
            out["stopped_episodes"] = len(self.cut_episodes)
        return out


def used_ids(episodes: list[Episode], stops: tuple[int, ...]) -> set[int]:
    """Every id a run can train or sample: the compact vocabulary of the stand-in model."""
    used: set[int] = set(stops)
    for ep in episodes:
        used.update(ep.buffer.ids)
        used.update(ep.naive.ids)
    return used
