"""The model under audit, loaded once for the RL loop: renderer, stop ids and the canonical episodes it plays."""

from __future__ import annotations

from tito_audit.errors import UsageError
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl.config import RLConfig
from tito_audit.rl.episodes import Episode, FormatCache, canonical_episodes
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import special_token_strings
from tito_audit.scenarios.catalog import build_scenarios
from tito_audit.sources.load import load


class TemplateEpisodes:
    """The model under audit as the loop sees it: its tokenizer and renderer, its stop ids, and one canonical
    episode per scenario its template renders (the scenarios ``--scenario`` selects)."""

    def __init__(self, cfg: RLConfig) -> None:
        self.loaded = load(cfg.model)
        tok = self.loaded.tokenizer
        self.renderer = Renderer(tok, self.loaded.chat_template)
        self.stops = stop_token_ids(tok, self.renderer, self.loaded.generation_eos_ids)
        scenarios = build_scenarios(special_token_strings(tok)[:4])
        if not cfg.include_injection:
            scenarios = [s for s in scenarios if "special_text" not in s.id]
        if cfg.scenarios:
            scenarios = [s for s in scenarios if any(s.id.startswith(p) for p in cfg.scenarios)]
        if not scenarios:
            raise UsageError(cfg.model, "no scenario matches --scenario")
        self.formats = FormatCache(self.stops)
        self.episodes, self.skipped = canonical_episodes(
            self.renderer, scenarios, self.stops, cfg.noncanonical_rate, cfg.seed, self.formats
        )
        if len(self.episodes) < 2:
            raise UsageError(cfg.model, f"the template renders only {len(self.episodes)} scenario(s)")
        by_id = {s.id: s for s in scenarios}
        self.scenarios = [by_id[e.scenario_id] for e in self.episodes]
        self.index = {e.scenario_id: k for k, e in enumerate(self.episodes)}

    def renderer_for(self, scenario_id: str) -> Renderer:
        sc = self.scenarios[self.index[scenario_id]]
        return self.renderer.with_kwargs(**sc.kwargs) if sc.kwargs else self.renderer


def used_ids(episodes: list[Episode], stops: tuple[int, ...]) -> set[int]:
    """Every id a run can train or sample: the compact vocabulary of the stand-in model."""
    used: set[int] = set(stops)
    for ep in episodes:
        used.update(ep.buffer.ids)
        used.update(ep.naive.ids)
    return used
