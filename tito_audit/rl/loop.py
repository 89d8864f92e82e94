"""The RL loop: build the episodes, compute the B and R gradients each step, step with B, record metrics.

``run_rl`` sets the run up (policy, warm-up, optimisers) and ``_Trainer.step`` does one step; the seeded random
streams (torch's global seed, the sampler's generator, the reward ``Random``) are drawn in one fixed order, so a
run is reproducible from its config.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from tito_audit.rendering.renderer import Renderer
from tito_audit.rl import diagnostics
from tito_audit.rl.config import RLConfig
from tito_audit.rl.episodes import Episode, View, assign_groups, group_advantages
from tito_audit.rl.gradients import compare, diff_norm, view_gradient
from tito_audit.rl.kl import kl_summary
from tito_audit.rl.model import (
    VocabMap,
    build_small_model,
    cap_threads,
    clone_frozen,
    load_weights,
    resolve_device,
    save_policy,
)
from tito_audit.rl.outputs import summarise, write_outputs
from tito_audit.rl.probability import VerifiableTurn, critical_tokens, low_probability_study, position_stats
from tito_audit.rl.quality import QualityGates
from tito_audit.rl.result import RLResult
from tito_audit.rl.sampling import GenerationSettings, sample_episode, turn_reward
from tito_audit.rl.template_episodes import TemplateEpisodes, used_ids
from tito_audit.rl.warmup import warmup


def _sample_batch(
    cfg: RLConfig,
    template: TemplateEpisodes,
    policy: Any,
    vmap: VocabMap,
    settings: GenerationSettings,
    gen: Any,
    cursor: int,
) -> list[Episode]:
    eps: list[Episode] = []
    for g in range(cfg.groups):
        k = (cursor + g) % len(template.episodes)
        for _ in range(cfg.group_size):
            ep = sample_episode(
                policy,
                vmap,
                template.renderer,
                template.scenarios[k],
                template.episodes[k].messages,
                template.stops,
                settings,
                gen,
                template.formats,
            )
            ep.group = g
            eps.append(ep)
    return eps


def _verifiable_turns(
    template: TemplateEpisodes, eps: list[Episode], rewards: dict[tuple[int, int], float]
) -> list[VerifiableTurn]:
    """Sampled turns whose expected message has tool calls: their reward is checkable by parsing."""
    out: list[VerifiableTurn] = []
    for n, e in enumerate(eps):
        expected = template.episodes[template.index[e.scenario_id]].messages
        assistants = [m for m in expected if m["role"] == "assistant"]
        r = template.renderer_for(e.scenario_id)
        fmt = template.formats(r)
        for k, ((a, end), want) in enumerate(zip(e.buffer.turns, assistants, strict=False)):
            if not want.get("tool_calls") or not fmt.can_show(len(want["tool_calls"])):
                continue

            def score(ids: list[int], r: Renderer = r, want: dict[str, Any] = want) -> float:
                from tito_audit.rl.episodes import parse_turn

                return turn_reward(want, parse_turn(r, template.formats(r), ids, template.stops, want)[0])

            out.append(VerifiableTurn(n, a, end, rewards.get((n, k), score(e.buffer.ids[a:end])), score))
    return out


def _policy(
    cfg: RLConfig, template: TemplateEpisodes, device: torch.device, setup: dict[str, Any]
) -> tuple[Any, VocabMap, bool]:
    """The policy (real weights, or a small random model over the ids the run uses), its vocabulary map, and
    whether it is trained; fills the setup's policy, vocabulary and thread lines."""
    size = len(template.loaded.tokenizer)
    if cfg.weights:
        policy, vmap = load_weights(cfg.weights, device, size)
        setup["policy"] = f"weights {cfg.weights}"
    else:
        vmap = (
            VocabMap.full(size)
            if cfg.vocab == "full"
            else VocabMap.compact(used_ids(template.episodes, template.stops))
        )
        policy = build_small_model(vmap.size, cfg.arch, cfg.hidden, cfg.layers, seed=cfg.seed).to(device)
        setup["policy"] = f"random {cfg.arch} {cfg.layers}x{cfg.hidden}"
    setup["model_vocab"] = vmap.size
    setup["vocab"] = "full" if vmap.is_full else "compact"
    setup["parameters"] = sum(p.numel() for p in policy.parameters())
    setup["torch_threads"] = cap_threads(device, setup["parameters"])
    return policy, vmap, bool(cfg.weights)


def _warm_up(
    cfg: RLConfig, policy: Any, vmap: VocabMap, template: TemplateEpisodes, log: Callable[[str], None]
) -> dict[str, Any]:
    """``--warmup`` SFT steps on the canonical episodes, so that the policy can sample the format."""
    started = time.perf_counter()
    buffers = [e.buffer for e in template.episodes]
    losses = warmup(policy, vmap, buffers, cfg.warmup, cfg.warmup_lr, seed=cfg.seed)
    tail = losses[-min(5, len(losses)) :]
    warm = {
        "steps": cfg.warmup,
        "loss_first": losses[0],
        "loss_final": sum(tail) / len(tail),
        "seconds": time.perf_counter() - started,
    }
    log(f"warm-up: {cfg.warmup} SFT steps, loss {losses[0]:.3f} -> {warm['loss_final']:.3f}")
    return warm


class _Trainer:
    """The optimisers, the frozen reference and the random streams of one run; ``step`` records one step."""

    def __init__(
        self,
        cfg: RLConfig,
        template: TemplateEpisodes,
        policy: Any,
        vmap: VocabMap,
        settings: GenerationSettings,
        sampled: bool,
        trained_policy: bool,
        gates: QualityGates | None,
        setup: dict[str, Any],
        log: Callable[[str], None],
    ) -> None:
        self.cfg, self.template, self.policy, self.vmap = cfg, template, policy, vmap
        self.settings, self.sampled, self.trained_policy, self.gates = settings, sampled, trained_policy, gates
        self.setup, self.log = setup, log
        self.ref = clone_frozen(policy)
        self.shadow = clone_frozen(policy) if cfg.shadow else None
        if self.shadow is not None:
            for p in self.shadow.parameters():
                p.requires_grad_(True)
        opt_cls = torch.optim.SGD if cfg.weights else torch.optim.Adam
        self.params = [p for p in policy.parameters() if p.requires_grad]
        self.opt = opt_cls(self.params, lr=cfg.lr)
        self.shadow_opt = opt_cls(list(self.shadow.parameters()), lr=cfg.lr) if self.shadow is not None else None
        self.theta0 = [p.detach().clone() for p in self.params] if self.shadow is not None else None
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.rng = random.Random(cfg.seed)
        self.cursor = 0
        self.noise = 0.0
        self.sampled_eps: list[Episode] = []

    def _batch(self) -> list[Episode]:
        cfg, template = self.cfg, self.template
        if self.sampled:
            eps = _sample_batch(cfg, template, self.policy, self.vmap, self.settings, self.gen, self.cursor)
            self.cursor += cfg.groups
            return eps
        # Diverse responses within a group: distinct scenarios, random rewards (identical responses would
        # cancel under group normalisation and leave only the tokenization difference).
        n_batch = cfg.groups * cfg.group_size
        idx = [(self.cursor + i) % len(template.episodes) for i in range(n_batch)]
        self.cursor += n_batch
        eps = [Episode(**{**template.episodes[i].__dict__}) for i in idx]
        for ep in eps:
            ep.reward = self.rng.random()
        assign_groups(eps, cfg.group_size)
        return eps

    def step(self, step: int) -> dict[str, Any]:
        ts = time.perf_counter()
        eps = self._batch()
        if self.cfg.control:
            for ep in eps:
                ep.naive = View(list(ep.buffer.ids), list(ep.buffer.mask))
                ep.naive_error = None
        self.sampled_eps += eps if self.sampled else []
        adv = group_advantages(eps)
        sample_s = time.perf_counter() - ts

        rec, g_b, per_seq = self._gradients(step, eps, adv)
        if self.sampled:
            self._sampled_diagnostics(step, rec, eps, adv, g_b, per_seq)
        else:
            rec["probability_diagnostics"] = (
                diagnostics.MEANINGLESS if not self.trained_policy else diagnostics.NOT_SAMPLED
            )
        self.opt.step()
        self._shadow_step(rec, eps, adv)
        rec["seconds"] = time.perf_counter() - ts
        rec["sample_seconds"] = sample_s
        return rec

    def _gradients(self, step: int, eps: list[Episode], adv: list[float]) -> tuple[dict[str, Any], Any, list[Any]]:
        """B and R gradients of the batch compared, and where the two views disagree token by token."""
        policy, vmap, cfg = self.policy, self.vmap, self.cfg
        g_r = view_gradient(policy, vmap, [e.naive for e in eps], adv)
        if step == 0:
            # The noise floor: the same B gradient computed twice on this device (measured once per run).
            g_b2 = view_gradient(policy, vmap, [e.buffer for e in eps], adv)
        g_b = view_gradient(policy, vmap, [e.buffer for e in eps], adv)  # last: .grad holds B for the step
        if step == 0:
            self.noise = compare(g_b.grads, g_b2.grads)["rel_error"] or 0.0
            del g_b2
        rec: dict[str, Any] = {
            "step": step,
            "gradient": compare(g_b.grads, g_r.grads),
            "noise_floor": self.noise,
            "rewards": [e.reward for e in eps],
            "advantages": adv,
            "naive_crashes": sum(e.naive_error is not None for e in eps),
            "scenarios": [e.scenario_id for e in eps],
        }
        r_tokens = g_r.tokens
        del g_r

        per_seq, dlogps = diagnostics.align_batch(eps, g_b.tokens, r_tokens)
        rec["alignment"] = diagnostics.batch_alignment(per_seq)
        if not self.sampled:  # sampled turns report canonical_turn_fraction instead
            rec["alignment"]["noncanonical_rate"] = sum(e.noncanonical_tokens for e in eps) / max(
                1, sum(e.sampled_tokens for e in eps)
            )
        rec["tool_calls"] = diagnostics.parse_rate(eps)
        if self.sampled:
            turns = [c for e in eps for c in e.canonical_turns]
            rec["canonical_turn_fraction"] = sum(turns) / len(turns) if turns else None
        rec["logp_mismatch"] = diagnostics.logp_mismatch(dlogps, cfg.clip)
        rec["worst_sequences"] = sorted(
            ({k: v for k, v in a.items() if k not in ("b_mismatched_positions",)} for a in per_seq),
            key=lambda s: -s["mismatched_trained"],
        )[:3]
        rec["dlogp_values"] = [float(x) for d in dlogps for x in d]
        return rec, g_b, per_seq

    def _sampled_diagnostics(
        self, step: int, rec: dict[str, Any], eps: list[Episode], adv: list[float], g_b: Any, per_seq: list[Any]
    ) -> None:
        """Sampler vs trainer, and the probability studies once the quality gates pass on the first step."""
        policy, vmap, cfg, gates = self.policy, self.vmap, self.cfg, self.gates
        rec["sampler_vs_trainer"] = diagnostics.sampler_vs_trainer(eps, g_b.tokens, cfg.clip)
        stats = [position_stats(policy, self.ref, vmap, e.buffer) for e in eps]
        p_y = [s.logp.exp() for s in stats]
        allp = torch.cat(p_y) if p_y else torch.zeros(0, dtype=torch.float64)
        rec["p_below_eta_fraction"] = float((allp < cfg.eta).double().mean()) if allp.numel() else None
        if step == 0 and gates is not None:
            gates.measure(rec)
            self.setup["quality_gates"] = gates.to_dict()
            self.setup["probability_diagnostics"] = "computed" if gates.passed else f"withheld: {gates.failed_line()}"
            if not gates.passed:
                self.log(f"probability diagnostics withheld: {gates.failed_line()}")
        if gates is not None and gates.passed:
            rec["kl"] = kl_summary(
                [s.logp for s in stats],
                [s.logp_ref for s in stats],
                [s.kl_exact for s in stats],
                pure=self.settings.pure,
                settings=json.dumps(asdict(self.settings)),
            )
            rec["low_prob"] = low_probability_study(
                policy, vmap, [e.buffer for e in eps], adv, p_y, g_b.grads, cfg.eta, cfg.alpha
            )
            rewards: dict[tuple[int, int], float] = {}
            verifiable = _verifiable_turns(self.template, eps, rewards)
            ent = {
                (n, t): float(h) for n, s in enumerate(stats) for t, h in zip(s.positions, s.entropy_ref, strict=True)
            }
            rec["critical"] = critical_tokens(
                policy,
                vmap,
                [e.buffer for e in eps],
                verifiable,
                ent,
                self.template.stops,
                self.settings.max_new_tokens,
                cfg.critical_budget,
                self.rng,
                self.template.renderer.token_texts,
                vmap.valid,
            )
            rec["mismatch_on"] = diagnostics.mismatch_on(per_seq, stats, cfg.eta, rec["critical"]["tested"])
            with torch.no_grad():  # the studies ran their own backward passes: put B back for the step
                for p, g in zip(self.params, g_b.grads, strict=True):
                    p.grad = g.clone()
        elif gates is not None:
            rec["probability_diagnostics"] = f"withheld: {gates.failed_line()}"

    def _shadow_step(self, rec: dict[str, Any], eps: list[Episode], adv: list[float]) -> None:
        """``--shadow``: step a copy with the R gradient and record how far it drifted from the B policy."""
        shadow, shadow_opt, theta0 = self.shadow, self.shadow_opt, self.theta0
        if shadow is None or shadow_opt is None or theta0 is None:
            return
        view_gradient(shadow, self.vmap, [e.naive for e in eps], adv)
        shadow_opt.step()
        s_params = [p for p in shadow.parameters() if p.requires_grad]
        moved = diff_norm([p.detach() for p in self.params], theta0)
        rec["shadow_drift"] = (
            diff_norm([p.detach() for p in self.params], [p.detach() for p in s_params]) / moved if moved > 0 else None
        )


def run_rl(
    cfg: RLConfig,
    log: Callable[[str], None] = lambda s: None,
    progress: Callable[[int, int], None] | None = None,
) -> RLResult:
    cfg.validate()
    t0 = time.perf_counter()
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    template = TemplateEpisodes(cfg)
    tok = template.loaded.tokenizer
    setup: dict[str, Any] = {
        "device": str(device),
        "scenarios": len(template.episodes),
        "skipped_scenarios": template.skipped,
        "stop_ids": list(template.stops),
        "tokenizer_vocab": len(tok),
        "formats": {k: f.describe() for k, f in template.formats._by_mode.items()},
    }
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    policy, vmap, trained_policy = _policy(cfg, template, device, setup)
    if cfg.control:
        for ep in template.episodes:
            ep.naive, ep.naive_error = View(list(ep.buffer.ids), list(ep.buffer.mask)), None
    # Model-free and exact: what re-tokenization does to every scenario the template renders.
    setup["token_facts"] = diagnostics.token_facts(template.episodes)
    setup["setup_seconds"] = time.perf_counter() - t0

    warm: dict[str, Any] | None = None
    if cfg.warmup:
        warm = setup["warmup"] = _warm_up(cfg, policy, vmap, template, log)
        trained_policy = True
    if cfg.save_policy:
        save_policy(policy, vmap, tok, template.loaded.chat_template, cfg.save_policy)
        setup["saved_policy"] = cfg.save_policy
        log(f"policy saved to {cfg.save_policy}")

    sampled = trained_policy and cfg.rollouts != "template"
    settings = GenerationSettings.parse(cfg.generation_kwargs, cfg.max_new_tokens)
    setup["sampling"] = asdict(settings) | {"pure": settings.pure} if sampled else "template (simulated rollouts)"
    gates = QualityGates(warm["loss_final"] if warm else None) if sampled else None
    if not sampled:
        setup["probability_diagnostics"] = diagnostics.MEANINGLESS if not trained_policy else diagnostics.NOT_SAMPLED

    trainer = _Trainer(cfg, template, policy, vmap, settings, sampled, trained_policy, gates, setup, log)
    result = RLResult(config=asdict(cfg), setup=setup)
    for step in range(cfg.steps):
        result.steps.append(trainer.step(step))
        if progress:
            progress(step + 1, cfg.steps)

    if trainer.sampled_eps:
        result.setup["sampled_token_facts"] = diagnostics.token_facts(trainer.sampled_eps)
    result.summary = summarise(result)
    result.summary["total_seconds"] = time.perf_counter() - t0
    if device.type == "cuda":
        result.summary["peak_gpu_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    if cfg.out_dir:
        write_outputs(result, Path(cfg.out_dir), template.renderer, plots=cfg.plots)
    return result
