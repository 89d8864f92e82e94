"""The RL loop: build the episodes, compute the B and R gradients each step, step with B, record metrics."""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from tito_audit.errors import UsageError
from tito_audit.rendering.renderer import Renderer
from tito_audit.rl import diagnostics as dg
from tito_audit.rl.episodes import (
    Episode,
    FormatCache,
    View,
    assign_groups,
    canonical_episodes,
    group_advantages,
)
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
from tito_audit.rl.probability import (
    VerifiableTurn,
    critical_tokens,
    low_probability_study,
    position_stats,
)
from tito_audit.rl.quality import QualityGates
from tito_audit.rl.result import RLResult
from tito_audit.rl.sampling import GenerationSettings, sample_episode, turn_reward
from tito_audit.rl.warmup import warmup
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import special_token_strings
from tito_audit.scenarios.catalog import build_scenarios
from tito_audit.sources.load import load

# R is "identical" to B when its relative error is within this many times the measured noise floor (the
# relative difference between two computations of the same B gradient on the same device).
NOISE_FACTOR = 10.0


@dataclass
class RLConfig:
    model: str
    steps: int = 3
    device: str = "auto"
    weights: str | None = None
    warmup: int = 0
    save_policy: str | None = None
    shadow: bool = False
    noncanonical_rate: float = 0.0
    generation_kwargs: str | None = None
    groups: int = 2
    group_size: int = 4
    lr: float = 1e-3
    seed: int = 0
    vocab: str = "compact"  # compact | full
    arch: str = "qwen2"
    hidden: int = 64
    layers: int = 2
    max_new_tokens: int = 96
    warmup_lr: float = 3e-3
    include_injection: bool = False  # scenarios with control-token text in content
    scenarios: tuple[str, ...] = ()  # scenario id prefixes
    clip: float = 2.0  # truncated importance sampling C
    control: bool = False  # R := B (the exactness control)
    out_dir: str | None = None
    plots: bool = True
    eta: float = 0.5  # Lopti's probability threshold
    alpha: float = 0.3  # Advantage Reweighting's alpha
    critical_budget: int = 24  # positions per step tested for critical tokens
    rollouts: str = "auto"  # auto (sample when the policy is trained) | sample | template

    def validate(self) -> None:
        if self.steps < 1:
            raise UsageError("rl", "--steps must be >= 1")
        if self.warmup < 0:
            raise UsageError("rl", "--warmup must be >= 0")
        if not 0.0 <= self.noncanonical_rate <= 1.0:
            raise UsageError("rl", "--noncanonical-rate must be in [0, 1]")
        if self.groups < 1 or self.group_size < 2:
            raise UsageError("rl", "need --groups >= 1 and --group-size >= 2 (GRPO normalises within a group)")
        if self.vocab not in ("compact", "full"):
            raise UsageError("rl", "--vocab must be compact or full")
        if self.weights and self.warmup:
            raise UsageError("rl", "--warmup trains the small random model; it cannot be combined with --weights")
        if self.clip <= 1.0:
            raise UsageError("rl", "--clip must be > 1")
        if self.rollouts not in ("auto", "sample", "template"):
            raise UsageError("rl", "--rollouts must be auto, sample or template")
        if self.rollouts == "sample" and not (self.weights or self.warmup):
            raise UsageError("rl", "--rollouts sample needs a policy that can sample: add --warmup N or --weights PATH")
        if self.generation_kwargs and (self.rollouts == "template" or not (self.weights or self.warmup)):
            raise UsageError(
                "rl",
                "--generation-kwargs sets how a policy samples, but nothing is sampled without a policy (the "
                "template stands in for the model): add --warmup N or --weights PATH",
            )


class _Context:
    """Everything the loop needs about the model under audit."""

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


def _used_ids(episodes: list[Episode], stops: tuple[int, ...]) -> set[int]:
    used: set[int] = set(stops)
    for ep in episodes:
        used.update(ep.buffer.ids)
        used.update(ep.naive.ids)
    return used


def _sample_batch(
    cfg: RLConfig, ctx: _Context, policy: Any, vmap: VocabMap, settings: GenerationSettings, gen: Any, cursor: int
) -> list[Episode]:
    eps: list[Episode] = []
    for g in range(cfg.groups):
        k = (cursor + g) % len(ctx.episodes)
        for _ in range(cfg.group_size):
            ep = sample_episode(
                policy,
                vmap,
                ctx.renderer,
                ctx.scenarios[k],
                ctx.episodes[k].messages,
                ctx.stops,
                settings,
                gen,
                ctx.formats,
            )
            ep.group = g
            eps.append(ep)
    return eps


def _verifiable_turns(ctx: _Context, eps: list[Episode], rewards: dict[tuple[int, int], float]) -> list[VerifiableTurn]:
    """Sampled turns whose expected message has tool calls: their reward is checkable by parsing."""
    out: list[VerifiableTurn] = []
    for n, e in enumerate(eps):
        expected = ctx.episodes[ctx.index[e.scenario_id]].messages
        assistants = [m for m in expected if m["role"] == "assistant"]
        r = ctx.renderer_for(e.scenario_id)
        fmt = ctx.formats(r)
        for k, ((a, end), want) in enumerate(zip(e.buffer.turns, assistants, strict=False)):
            if not want.get("tool_calls") or not fmt.can_show(len(want["tool_calls"])):
                continue

            def score(ids: list[int], r: Renderer = r, want: dict[str, Any] = want) -> float:
                from tito_audit.rl.episodes import parse_turn

                return turn_reward(want, parse_turn(r, ctx.formats(r), ids, ctx.stops, want)[0])

            out.append(VerifiableTurn(n, a, end, rewards.get((n, k), score(e.buffer.ids[a:end])), score))
    return out


def run_rl(
    cfg: RLConfig,
    log: Callable[[str], None] = lambda s: None,
    progress: Callable[[int, int], None] | None = None,
) -> RLResult:
    cfg.validate()
    t0 = time.perf_counter()
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    ctx = _Context(cfg)
    tok = ctx.loaded.tokenizer
    setup: dict[str, Any] = {
        "device": str(device),
        "scenarios": len(ctx.episodes),
        "skipped_scenarios": ctx.skipped,
        "stop_ids": list(ctx.stops),
        "tokenizer_vocab": len(tok),
        "formats": {k: f.describe() for k, f in ctx.formats._by_mode.items()},
    }
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    trained_policy = False
    if cfg.weights:
        policy, vmap = load_weights(cfg.weights, device, len(tok))
        trained_policy = True
        setup["policy"] = f"weights {cfg.weights}"
    else:
        vmap = VocabMap.full(len(tok)) if cfg.vocab == "full" else VocabMap.compact(_used_ids(ctx.episodes, ctx.stops))
        policy = build_small_model(vmap.size, cfg.arch, cfg.hidden, cfg.layers, seed=cfg.seed).to(device)
        setup["policy"] = f"random {cfg.arch} {cfg.layers}x{cfg.hidden}"
    setup["model_vocab"] = vmap.size
    setup["vocab"] = "full" if vmap.is_full else "compact"
    setup["parameters"] = sum(p.numel() for p in policy.parameters())
    setup["torch_threads"] = cap_threads(device, setup["parameters"])
    if cfg.control:
        for ep in ctx.episodes:
            ep.naive, ep.naive_error = View(list(ep.buffer.ids), list(ep.buffer.mask)), None
    # Model-free and exact: what re-tokenization does to every scenario the template renders.
    setup["token_facts"] = dg.token_facts(ctx.episodes)
    setup["setup_seconds"] = time.perf_counter() - t0

    warm: dict[str, Any] | None = None
    if cfg.warmup:
        tw = time.perf_counter()
        losses = warmup(policy, vmap, [e.buffer for e in ctx.episodes], cfg.warmup, cfg.warmup_lr, seed=cfg.seed)
        trained_policy = True
        tail = losses[-min(5, len(losses)) :]
        warm = {
            "steps": cfg.warmup,
            "loss_first": losses[0],
            "loss_final": sum(tail) / len(tail),
            "seconds": time.perf_counter() - tw,
        }
        setup["warmup"] = warm
        log(f"warm-up: {cfg.warmup} SFT steps, loss {losses[0]:.3f} -> {warm['loss_final']:.3f}")
    if cfg.save_policy:
        save_policy(policy, vmap, tok, ctx.loaded.chat_template, cfg.save_policy)
        setup["saved_policy"] = cfg.save_policy
        log(f"policy saved to {cfg.save_policy}")

    sampled = trained_policy and cfg.rollouts != "template"
    settings = GenerationSettings.parse(cfg.generation_kwargs, cfg.max_new_tokens)
    setup["sampling"] = asdict(settings) | {"pure": settings.pure} if sampled else "template (simulated rollouts)"
    gates = QualityGates(warm["loss_final"] if warm else None) if sampled else None
    if not sampled:
        setup["probability_diagnostics"] = dg.MEANINGLESS if not trained_policy else dg.NOT_SAMPLED

    ref = clone_frozen(policy)
    shadow = clone_frozen(policy) if cfg.shadow else None
    if shadow is not None:
        for p in shadow.parameters():
            p.requires_grad_(True)
    opt_cls = torch.optim.SGD if cfg.weights else torch.optim.Adam
    params = [p for p in policy.parameters() if p.requires_grad]
    opt = opt_cls(params, lr=cfg.lr)
    shadow_opt = opt_cls(list(shadow.parameters()), lr=cfg.lr) if shadow is not None else None
    theta0 = [p.detach().clone() for p in params] if shadow is not None else None
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)

    result = RLResult(config=asdict(cfg), setup=setup)
    n_batch = cfg.groups * cfg.group_size
    cursor = 0
    noise = 0.0
    sampled_eps: list[Episode] = []
    for step in range(cfg.steps):
        ts = time.perf_counter()
        if sampled:
            eps = _sample_batch(cfg, ctx, policy, vmap, settings, gen, cursor)
            cursor += cfg.groups
        else:
            # Diverse responses within a group: distinct scenarios, random rewards (identical responses would
            # cancel under group normalisation and leave only the tokenization difference).
            idx = [(cursor + i) % len(ctx.episodes) for i in range(n_batch)]
            cursor += n_batch
            eps = [Episode(**{**ctx.episodes[i].__dict__}) for i in idx]
            for ep in eps:
                ep.reward = rng.random()
            assign_groups(eps, cfg.group_size)
        if cfg.control:
            for ep in eps:
                ep.naive = View(list(ep.buffer.ids), list(ep.buffer.mask))
                ep.naive_error = None
        sampled_eps += eps if sampled else []
        adv = group_advantages(eps)
        sample_s = time.perf_counter() - ts

        g_r = view_gradient(policy, vmap, [e.naive for e in eps], adv)
        if step == 0:
            # The noise floor: the same B gradient computed twice on this device (measured once per run).
            g_b2 = view_gradient(policy, vmap, [e.buffer for e in eps], adv)
        g_b = view_gradient(policy, vmap, [e.buffer for e in eps], adv)  # last: .grad holds B for the step
        if step == 0:
            noise = compare(g_b.grads, g_b2.grads)["rel_error"] or 0.0
            del g_b2
        rec: dict[str, Any] = {
            "step": step,
            "gradient": compare(g_b.grads, g_r.grads),
            "noise_floor": noise,
            "rewards": [e.reward for e in eps],
            "advantages": adv,
            "naive_crashes": sum(e.naive_error is not None for e in eps),
            "scenarios": [e.scenario_id for e in eps],
        }
        r_tokens = g_r.tokens
        del g_r

        per_seq, dlogps = dg.align_batch(eps, g_b.tokens, r_tokens)
        rec["alignment"] = dg.batch_alignment(per_seq)
        if not sampled:  # sampled turns report canonical_turn_fraction instead
            rec["alignment"]["noncanonical_rate"] = sum(e.noncanonical_tokens for e in eps) / max(
                1, sum(e.sampled_tokens for e in eps)
            )
        rec["tool_calls"] = dg.parse_rate(eps)
        if sampled:
            turns = [c for e in eps for c in e.canonical_turns]
            rec["canonical_turn_fraction"] = sum(turns) / len(turns) if turns else None
        rec["logp_mismatch"] = dg.logp_mismatch(dlogps, cfg.clip)
        rec["worst_sequences"] = sorted(
            ({k: v for k, v in a.items() if k not in ("b_mismatched_positions",)} for a in per_seq),
            key=lambda s: -s["mismatched_trained"],
        )[:3]
        rec["dlogp_values"] = [float(x) for d in dlogps for x in d]

        if sampled:
            rec["sampler_vs_trainer"] = dg.sampler_vs_trainer(eps, g_b.tokens, cfg.clip)
            stats = [position_stats(policy, ref, vmap, e.buffer) for e in eps]
            p_y = [s.logp.exp() for s in stats]
            allp = torch.cat(p_y) if p_y else torch.zeros(0, dtype=torch.float64)
            rec["p_below_eta_fraction"] = float((allp < cfg.eta).double().mean()) if allp.numel() else None
            if step == 0 and gates is not None:
                gates.measure(rec)
                setup["quality_gates"] = gates.to_dict()
                setup["probability_diagnostics"] = "computed" if gates.passed else f"withheld: {gates.failed_line()}"
                if not gates.passed:
                    log(f"probability diagnostics withheld: {gates.failed_line()}")
            if gates is not None and gates.passed:
                rec["kl"] = kl_summary(
                    [s.logp for s in stats],
                    [s.logp_ref for s in stats],
                    [s.kl_exact for s in stats],
                    pure=settings.pure,
                    settings=json.dumps(asdict(settings)),
                )
                rec["low_prob"] = low_probability_study(
                    policy, vmap, [e.buffer for e in eps], adv, p_y, g_b.grads, cfg.eta, cfg.alpha
                )
                rewards: dict[tuple[int, int], float] = {}
                verifiable = _verifiable_turns(ctx, eps, rewards)
                ent = {
                    (n, t): float(h)
                    for n, s in enumerate(stats)
                    for t, h in zip(s.positions, s.entropy_ref, strict=True)
                }
                rec["critical"] = critical_tokens(
                    policy,
                    vmap,
                    [e.buffer for e in eps],
                    verifiable,
                    ent,
                    ctx.stops,
                    settings.max_new_tokens,
                    cfg.critical_budget,
                    rng,
                    ctx.renderer.token_texts,
                    vmap.valid,
                )
                rec["mismatch_on"] = dg.mismatch_on(per_seq, stats, cfg.eta, rec["critical"]["tested"])
                with torch.no_grad():  # the studies ran their own backward passes: put B back for the step
                    for p, g in zip(params, g_b.grads, strict=True):
                        p.grad = g.clone()
            elif gates is not None:
                rec["probability_diagnostics"] = f"withheld: {gates.failed_line()}"
        else:
            rec["probability_diagnostics"] = dg.MEANINGLESS if not trained_policy else dg.NOT_SAMPLED

        opt.step()
        if shadow is not None and shadow_opt is not None and theta0 is not None:
            view_gradient(shadow, vmap, [e.naive for e in eps], adv)
            shadow_opt.step()
            s_params = [p for p in shadow.parameters() if p.requires_grad]
            moved = diff_norm([p.detach() for p in params], theta0)
            rec["shadow_drift"] = (
                diff_norm([p.detach() for p in params], [p.detach() for p in s_params]) / moved if moved > 0 else None
            )
        rec["seconds"] = time.perf_counter() - ts
        rec["sample_seconds"] = sample_s
        result.steps.append(rec)
        if progress:
            progress(step + 1, cfg.steps)

    if sampled_eps:
        result.setup["sampled_token_facts"] = dg.token_facts(sampled_eps)
    result.summary = summarise(result)
    result.summary["total_seconds"] = time.perf_counter() - t0
    if device.type == "cuda":
        result.summary["peak_gpu_memory_gb"] = torch.cuda.max_memory_allocated(device) / 2**30
    if cfg.out_dir:
        write_outputs(result, Path(cfg.out_dir), ctx.renderer, plots=cfg.plots)
    return result


def summarise(result: RLResult) -> dict[str, Any]:
    steps = result.steps
    cos = [s["gradient"]["cosine"] for s in steps if s["gradient"]["cosine"] is not None]
    err = [s["gradient"]["rel_error"] for s in steps if s["gradient"]["rel_error"] is not None]
    noise = max(s["noise_floor"] for s in steps)
    facts = result.setup.get("sampled_token_facts") or result.setup["token_facts"]
    calls = [s["tool_calls"] for s in steps]
    expected = sum(c["turns_expected"] for c in calls)
    out: dict[str, Any] = {
        "scenarios_played": len({sc for s in steps for sc in s["scenarios"]}),
        "sequences_affected": facts["sequences_affected"],
        "sequences": facts["sequences"],
        "mismatched_trained": facts["mismatched_trained"],
        "flip_sampled_dropped": facts["flip_sampled_dropped"],
        "flip_template_trained": facts["flip_template_trained"],
        "shape_mismatch_sequences": facts["shape_mismatch_sequences"],
        "tool_call_parse_rate": (sum(c["turns_parsed"] for c in calls) / expected) if expected else None,
        "cosine_min": min(cos) if cos else None,
        "cosine_mean": sum(cos) / len(cos) if cos else None,
        "rel_error_max": max(err) if err else None,
        "noise_floor": noise,
        "identical_tolerance": NOISE_FACTOR * noise,
        "abs_dlogp_max": max((s["logp_mismatch"].get("abs_dlogp_max", 0.0) for s in steps), default=0.0),
        "step_seconds_mean": sum(s["seconds"] for s in steps) / len(steps),
        "corrupted": bool(err) and max(err) > NOISE_FACTOR * noise,
    }
    if all("kl" in s for s in steps):
        for k in ("k1", "k3", "exact"):
            out[f"kl_{k}_mean"] = [s["kl"][f"{k}_mean"] for s in steps]
            out[f"kl_{k}_se"] = [s["kl"][f"{k}_se"] for s in steps]
        out["negative_kl_steps"] = [s["step"] for s in steps if s["kl"]["negative_kl"]]
    if "shadow_drift" in steps[-1]:
        out["shadow_drift_final"] = steps[-1]["shadow_drift"]
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def write_outputs(result: RLResult, out: Path, renderer: Renderer, plots: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if plots:
        from tito_audit.rl.plots import write_plots

        result.files.extend(str(p) for p in write_plots(result, out))
    metrics = out / "metrics.json"
    result.files.append(str(metrics))
    metrics.write_text(json.dumps(_jsonable(result.to_dict()), indent=1, ensure_ascii=False), encoding="utf-8")
