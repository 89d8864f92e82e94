"""The RL loop: build the episodes, compare the B and R gradients each step, step with B, record metrics.

``run_rl`` sets the run up (policy, warm-up, reference, optimiser) and ``_Trainer.step`` does one step:

1. the verdict's comparison: B's and R's gradients at a fixed advantage (A = 1 for every sequence, each view
   normalised by its own trained tokens), so that it does not depend on rewards (random in template mode, often
   all equal in a group); B is held, R compared with it parameter by parameter as it is produced
   (``gradient_compare``). At step 0, B is computed twice first: the noise floor;
2. with a trained policy's own samples: the probability studies (``positions``, ``kl``/``kl_bias``,
   ``low_probability``, ``update_studies``, ``critical_tokens``), once the quality gates pass;
3. the update: B's gradient with the batch's GRPO advantages, one optimiser step.

At most two gradients are held at once outside ``update_studies`` (three there): the held one and the one that
accumulates over the views before it is compared. No copy of the policy is
made except the frozen reference of the KL section (only with sampled rollouts) and ``--shadow``'s copy. The
seeded random streams (torch's global seed, the sampler's generator, the reward ``Random``) are drawn in one fixed
order, so a run is reproducible from its config.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch

from tito_audit.policy.generation import GenerationSettings
from tito_audit.policy.gradient_compare import clear_grads, compare, compare_with, hold_gradient, trainable
from tito_audit.policy.gradients import surrogate_pass
from tito_audit.policy.model import (
    VocabMap,
    build_small_model,
    cap_threads,
    clone_frozen,
    load_weights,
    resolve_device,
    save_policy,
    torch_dtype,
)
from tito_audit.policy.view import View
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl import diagnostics
from tito_audit.rl.config import RLConfig
from tito_audit.rl.critical_tokens import VerifiableTurn, critical_tokens
from tito_audit.rl.episodes import Episode, assign_groups, group_advantages, parse_turn
from tito_audit.rl.kl import kl_summary
from tito_audit.rl.low_probability import low_probability_figure, token_records
from tito_audit.rl.outputs import summarise, write_outputs
from tito_audit.rl.positions import position_stats
from tito_audit.rl.quality import QualityGates
from tito_audit.rl.result import RLResult
from tito_audit.rl.sampling import sample_episodes, turn_reward
from tito_audit.rl.template_episodes import TemplateEpisodes, used_ids
from tito_audit.rl.update_studies import update_studies
from tito_audit.rl.warmup import warmup

FIXED_ADVANTAGE = "A = 1 for every sequence (each view normalised by its own trained tokens)"


def _verifiable_turns(template: TemplateEpisodes, eps: list[Episode]) -> list[VerifiableTurn]:
    """Sampled turns whose expected message has tool calls: their reward is checkable by parsing."""
    out: list[VerifiableTurn] = []
    for n, e in enumerate(eps):
        expected = template.episodes[template.index[e.scenario_id]].messages
        assistants = [m for m in expected if m["role"] == "assistant"]
        r = template.renderer_for(e.scenario_id)
        fmt = template.formats(r)
        for (a, end), want in zip(e.buffer.turns, assistants, strict=False):
            if not want.get("tool_calls") or not fmt.can_show(len(want["tool_calls"])):
                continue

            def score(ids: list[int], r: Renderer = r, want: dict[str, Any] = want) -> float:
                return turn_reward(want, parse_turn(r, template.formats(r), ids, template.stops, want)[0])

            out.append(VerifiableTurn(n, a, end, score(e.buffer.ids[a:end]), score))
    return out


def _policy(
    cfg: RLConfig, template: TemplateEpisodes, device: torch.device, setup: dict[str, Any]
) -> tuple[Any, VocabMap, bool]:
    """The policy (real weights, or a small random model over the ids the run uses), its vocabulary map, and
    whether it is trained; fills the setup's policy, vocabulary and thread lines."""
    size = len(template.loaded.tokenizer)
    dtype = torch_dtype(cfg.dtype)
    if cfg.weights:
        policy, vmap = load_weights(cfg.weights, device, size, dtype)
        setup["policy"] = f"weights {cfg.weights}"
    else:
        vmap = (
            VocabMap.full(size)
            if cfg.vocab == "full"
            else VocabMap.compact(used_ids(template.episodes, template.stops))
        )
        policy = build_small_model(vmap.size, cfg.arch, cfg.hidden, cfg.layers, seed=cfg.seed).to(device, dtype)
        setup["policy"] = f"random {cfg.arch} {cfg.layers}x{cfg.hidden}"
    setup["model_vocab"] = vmap.size
    setup["vocab"] = "full" if vmap.is_full else "compact"
    setup["dtype"] = cfg.dtype
    setup["parameters"] = sum(p.numel() for p in policy.parameters())
    setup["weights_bytes"] = sum(p.numel() * p.element_size() for p in policy.parameters())
    setup["torch_threads"] = cap_threads(device, setup["parameters"])
    return policy, vmap, bool(cfg.weights)


def _reference(cfg: RLConfig, policy: Any, vmap: VocabMap, template: TemplateEpisodes, setup: dict[str, Any]) -> Any:
    """The KL section's reference: ``--ref`` (same vocabulary as the policy), else the step-0 policy."""
    if not cfg.ref:
        setup["reference"] = "the step-0 policy (frozen copy)"
        return clone_frozen(policy)
    device = next(policy.parameters()).device
    ref, ref_vmap = load_weights(cfg.ref, device, len(template.loaded.tokenizer), torch_dtype(cfg.dtype))
    if ref_vmap.model_to_tok != vmap.model_to_tok or ref_vmap.size != vmap.size:
        from tito_audit.errors import UsageError

        raise UsageError(cfg.ref, "--ref has another vocabulary than the policy (its rows map to other token ids)")
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    setup["reference"] = f"weights {cfg.ref}"
    return ref


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
    """The optimiser, the reference and the random streams of one run; ``step`` records one step."""

    def __init__(
        self,
        cfg: RLConfig,
        template: TemplateEpisodes,
        policy: Any,
        vmap: VocabMap,
        settings: GenerationSettings,
        ref: Any | None,
        trained_policy: bool,
        gates: QualityGates | None,
        setup: dict[str, Any],
        log: Callable[[str], None],
    ) -> None:
        self.cfg, self.template, self.policy, self.vmap = cfg, template, policy, vmap
        self.settings, self.ref, self.trained_policy, self.gates = settings, ref, trained_policy, gates
        self.sampled = ref is not None
        self.setup, self.log = setup, log
        self.shadow = clone_frozen(policy) if cfg.shadow else None
        if self.shadow is not None:
            for p in self.shadow.parameters():
                p.requires_grad_(True)
        opt_cls = torch.optim.SGD if cfg.weights else torch.optim.Adam
        self.params = trainable(policy)
        self.opt = opt_cls(self.params, lr=cfg.lr)
        self.shadow_opt = opt_cls(trainable(self.shadow), lr=cfg.lr) if self.shadow is not None else None
        self.theta0 = [p.detach().clone() for p in self.params] if self.shadow is not None else None
        device = next(policy.parameters()).device
        self.gen = torch.Generator(device=device).manual_seed(cfg.seed)
        self.rng = random.Random(cfg.seed)
        self.cursor = 0
        self.noise = 0.0
        self.sampled_eps: list[Episode] = []

    def _pass(self, views: list[View], adv: list[float], **kw: Any) -> Any:
        return surrogate_pass(self.policy, self.vmap, views, adv, **kw)

    def _batch(self) -> list[Episode]:
        cfg, template = self.cfg, self.template
        if self.sampled:
            plays = []
            for g in range(cfg.groups):
                k = (self.cursor + g) % len(template.episodes)
                plays += [(template.scenarios[k], template.episodes[k].messages)] * cfg.group_size
            self.cursor += cfg.groups
            eps = sample_episodes(
                self.policy,
                self.vmap,
                template.renderer,
                plays,
                template.stops,
                self.settings,
                self.gen,
                template.formats,
            )
            assign_groups(eps, cfg.group_size)
            return eps
        # Diverse responses within a group: distinct scenarios, random rewards (identical responses would
        # cancel under group normalisation). The rewards only drive the update; the verdict's comparison uses a
        # fixed advantage.
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
        self.sampled_eps += eps if self.sampled else []  # their token facts: R as the template rebuilds it
        if self.cfg.control:  # R := B for the comparison only, on copies
            eps = [replace(ep, naive=View(list(ep.buffer.ids), list(ep.buffer.mask)), naive_error=None) for ep in eps]
        adv = group_advantages(eps)
        sample_s = time.perf_counter() - ts

        rec, b_tokens, per_seq = self._compare(step, eps, adv)
        if self.sampled:
            self._sampled_diagnostics(step, rec, eps, adv, b_tokens, per_seq)
        else:
            rec["probability_diagnostics"] = (
                diagnostics.MEANINGLESS if not self.trained_policy else diagnostics.NOT_SAMPLED
            )
        clear_grads(self.params)  # the update: B with the batch's advantages
        self._pass([e.buffer for e in eps], adv)(None)
        self.opt.step()
        clear_grads(self.params)
        self._shadow_step(rec, eps, adv)
        rec["seconds"] = time.perf_counter() - ts
        rec["sample_seconds"] = sample_s
        return rec

    def _compare(self, step: int, eps: list[Episode], adv: list[float]) -> tuple[dict[str, Any], list[Any], list[Any]]:
        """B and R gradients at a fixed advantage, and where the two views disagree token by token."""
        ones = [1.0] * len(eps)
        b_tokens: list[Any] = []
        r_tokens: list[Any] = []
        held = hold_gradient(self.params, self._pass([e.buffer for e in eps], ones, tokens_out=b_tokens))
        if step == 0:  # the noise floor: the same B gradient computed twice on this device
            again = compare_with(held, self._pass([e.buffer for e in eps], ones), release=False)
            self.noise = again.rel_error or 0.0
        cmp = compare_with(held, self._pass([e.naive for e in eps], ones, tokens_out=r_tokens))
        rec: dict[str, Any] = {
            "step": step,
            "gradient": cmp.to_dict() | {"advantage": FIXED_ADVANTAGE},
            "noise_floor": self.noise,
            "rewards": [e.reward for e in eps],
            "advantages": adv,
            "naive_crashes": sum(e.naive_error is not None for e in eps),
            "scenarios": [e.scenario_id for e in eps],
        }
        per_seq, dlogps = diagnostics.align_batch(eps, b_tokens, r_tokens)
        rec["alignment"] = diagnostics.batch_alignment(per_seq)
        if not self.sampled:  # sampled turns report canonical_turn_fraction instead
            rec["alignment"]["noncanonical_rate"] = sum(e.noncanonical_tokens for e in eps) / max(
                1, sum(e.sampled_tokens for e in eps)
            )
        rec["tool_calls"] = diagnostics.parse_rate(eps)
        if self.sampled:
            turns = [c for e in eps for c in e.canonical_turns]
            rec["canonical_turn_fraction"] = sum(turns) / len(turns) if turns else None
        rec["logp_mismatch"] = diagnostics.logp_mismatch(dlogps, self.cfg.clip)
        rec["worst_sequences"] = sorted(
            ({k: v for k, v in a.items() if k not in ("b_mismatched_positions",)} for a in per_seq),
            key=lambda s: -s["mismatched_trained"],
        )[:3]
        rec["dlogp_values"] = [float(x) for d in dlogps for x in d]
        return rec, b_tokens, per_seq

    def _sampled_diagnostics(
        self,
        step: int,
        rec: dict[str, Any],
        eps: list[Episode],
        adv: list[float],
        b_tokens: list[Any],
        per_seq: list[Any],
    ) -> None:
        """Sampler vs trainer, and the probability studies once the quality gates pass on the first step."""
        policy, vmap, cfg, gates = self.policy, self.vmap, self.cfg, self.gates
        buffers = [e.buffer for e in eps]
        rec["sampler_vs_trainer"] = diagnostics.sampler_vs_trainer(eps, b_tokens, cfg.clip)
        stats = [position_stats(policy, self.ref, vmap, b, self.settings, self.template.stops) for b in buffers]
        p_y = [s.p for s in stats]
        allp = torch.cat(p_y) if p_y else torch.zeros(0, dtype=torch.float64)
        rec["p_below_eta_fraction"] = float((allp < cfg.eta).double().mean()) if allp.numel() else None
        if step == 0 and gates is not None:
            gates.measure(rec)
            self.setup["quality_gates"] = gates.to_dict()
            self.setup["probability_diagnostics"] = "computed" if gates.passed else f"withheld: {gates.failed_line()}"
            if not gates.passed:
                self.log(f"probability diagnostics withheld: {gates.failed_line()}")
        if gates is None or not gates.passed:
            rec["probability_diagnostics"] = f"withheld: {gates.failed_line() if gates else 'no quality gates'}"
            return
        rec["kl"] = kl_summary(
            [s.logp for s in stats],
            [s.logp_ref for s in stats],
            [s.kl_exact for s in stats],
            expectations=[s.expectations for s in stats],
            pure=self.settings.pure,
            settings=self.settings.describe(),
        )
        rec["low_prob"] = low_probability_figure(token_records(buffers, stats, adv), cfg.eta)
        rec["updates"] = update_studies(policy, vmap, buffers, adv, p_y, cfg.eta, cfg.alpha)
        verifiable = _verifiable_turns(self.template, eps)
        entropy = {
            (n, t): float(h) for n, s in enumerate(stats) for t, h in zip(s.positions, s.entropy_ref, strict=True)
        }
        rec["critical"] = critical_tokens(
            policy,
            vmap,
            buffers,
            verifiable,
            entropy,
            self.template.stops,
            self.settings.max_new_tokens,
            cfg.critical_budget,
            self.rng,
            self.template.renderer.token_texts,
            len(self.template.loaded.tokenizer),
            cfg.critical_beta,
        )
        rec["mismatch_on"] = diagnostics.mismatch_on(per_seq, stats, cfg.eta, rec["critical"]["tested"])

    def _shadow_step(self, rec: dict[str, Any], eps: list[Episode], adv: list[float]) -> None:
        """``--shadow``: step a copy with the R gradient and record how far it drifted from the B policy."""
        shadow, shadow_opt, theta0 = self.shadow, self.shadow_opt, self.theta0
        if shadow is None or shadow_opt is None or theta0 is None:
            return
        s_params = trainable(shadow)
        clear_grads(s_params)
        surrogate_pass(shadow, self.vmap, [e.naive for e in eps], adv)(None)
        shadow_opt.step()
        clear_grads(s_params)
        current = [p.detach() for p in self.params]
        moved = compare(current, theta0).diff_norm
        rec["shadow_drift"] = compare(current, [p.detach() for p in s_params]).diff_norm / moved if moved > 0 else None


def run_rl(
    cfg: RLConfig,
    log: Callable[[str], None] = lambda s: None,
    progress: Callable[[int, int], None] | None = None,
) -> RLResult:
    cfg.validate()
    t0 = time.perf_counter()
    device = resolve_device(cfg.device)
    settings = cfg.generation_settings()
    torch.manual_seed(cfg.seed)
    template = TemplateEpisodes(cfg)
    tok = template.loaded.tokenizer
    setup: dict[str, Any] = {
        "model": cfg.model,
        "template_sha256": template.loaded.provenance.template_sha256,
        "device": str(device),
        "scenarios": len(template.episodes),
        "coverage": template.coverage(),
        "skipped_scenarios": template.skipped,
        "stop_ids": list(template.stops),
        "tokenizer_vocab": len(tok),
        "formats": {k: f.describe() for k, f in template.formats._by_mode.items()},
        "comparison_advantage": FIXED_ADVANTAGE,
    }
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    policy, vmap, trained_policy = _policy(cfg, template, device, setup)
    # Model-free and exact: what re-tokenization does to every scenario the template renders, in every thinking
    # mode, whatever --scenario plays and before --control replaces R with B for the gradient comparison.
    setup["token_facts"] = diagnostics.token_facts([*template.all_episodes, *template.cut_episodes], template.mode_of)
    setup["template_parse_rate"] = diagnostics.parse_rate(template.all_episodes)["rate"]
    setup["noncanonical_splits"] = {
        "rate": cfg.noncanonical_rate,
        "tokens": sum(e.noncanonical_tokens for e in template.all_episodes),
        "sampled_tokens": sum(e.sampled_tokens - e.noncanonical_tokens for e in template.all_episodes),  # unsplit
    }
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
    setup["sampling"] = (
        asdict(settings) | {"pure": settings.pure, "description": settings.describe()}
        if sampled
        else "template (simulated rollouts)"
    )
    gates = QualityGates(warm["loss_final"] if warm else None) if sampled else None
    if not sampled:
        setup["probability_diagnostics"] = diagnostics.MEANINGLESS if not trained_policy else diagnostics.NOT_SAMPLED
    ref = _reference(cfg, policy, vmap, template, setup) if sampled else None

    trainer = _Trainer(cfg, template, policy, vmap, settings, ref, trained_policy, gates, setup, log)
    result = RLResult(config=asdict(cfg), setup=setup)
    interrupted = False
    try:
        for step in range(cfg.steps):
            result.steps.append(trainer.step(step))
            if progress:
                progress(step + 1, cfg.steps)
    except KeyboardInterrupt:  # the finished steps are summarised and written, marked incomplete
        if not result.steps:
            raise RLInterrupted(None, cfg.steps) from None
        interrupted = True

    if trainer.sampled_eps:
        result.setup["sampled_token_facts"] = diagnostics.token_facts(trainer.sampled_eps, template.mode_of)
        turns = [c for e in trainer.sampled_eps for c in e.canonical_turns]
        result.setup["canonical_turn_fraction"] = sum(turns) / len(turns) if turns else None
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        result.setup["peak_gpu_memory_gb"] = peak / 2**30
        result.setup["peak_bytes_per_parameter_beyond_weights"] = (peak - setup["weights_bytes"]) / setup["parameters"]
    result.summary = summarise(result)
    result.summary["total_seconds"] = time.perf_counter() - t0
    result.summary["complete"] = not interrupted
    if interrupted:
        result.summary["interrupted"] = f"interrupted after {len(result.steps)} of {cfg.steps} steps"
    if cfg.out_dir:
        write_outputs(result, Path(cfg.out_dir), template.renderer, plots=cfg.plots)
    if interrupted:
        raise RLInterrupted(result, cfg.steps)
    return result


class RLInterrupted(Exception):
    """Ctrl-C during the loop: ``result`` holds the finished steps, summarised and written (``--out``) with
    ``complete`` False; None when no step finished."""

    def __init__(self, result: RLResult | None, steps: int) -> None:
        done = len(result.steps) if result is not None else 0
        super().__init__(f"interrupted after {done} of {steps} steps")
        self.result = result
