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
from tito_audit.rl.gradients import compare, token_logps, view_gradient
from tito_audit.rl.kl import NEGATIVE_KL_EXPLANATION, kl_summary
from tito_audit.rl.model import (
    VocabMap,
    build_small_model,
    clone_frozen,
    load_weights,
    resolve_device,
    save_policy,
)
from tito_audit.rl.result import RLResult
from tito_audit.rl.sampling import GenerationSettings, sample_episode
from tito_audit.rl.warmup import warmup
from tito_audit.rollout.stop import stop_token_ids
from tito_audit.rollout.tokens import special_token_strings
from tito_audit.scenarios.catalog import build_scenarios
from tito_audit.sources.load import load


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
    max_new_tokens: int = 48
    warmup_lr: float = 3e-3
    include_injection: bool = False  # scenarios with control-token text in content
    scenarios: tuple[str, ...] = ()  # scenario id prefixes
    clip: float = 2.0  # truncated importance sampling C
    certainty_beta: float = 20.0
    control: bool = False  # R := B (the exactness control)
    out_dir: str | None = None
    chunk: int = 256
    plots: bool = True

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


def _flat_params(model: Any) -> torch.Tensor:
    return torch.cat([p.detach().float().reshape(-1).cpu() for p in model.parameters()])


class _Context:
    """Everything the loop needs about the model under audit."""

    def __init__(self, cfg: RLConfig, log: Callable[[str], None]) -> None:
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


def _used_ids(episodes: list[Episode], stops: tuple[int, ...]) -> set[int]:
    used: set[int] = set(stops)
    for ep in episodes:
        used.update(ep.buffer.ids)
        used.update(ep.naive.ids)
    return used


def run_rl(
    cfg: RLConfig,
    log: Callable[[str], None] = lambda s: None,
    progress: Callable[[int, int], None] | None = None,
) -> RLResult:
    cfg.validate()
    t0 = time.perf_counter()
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    ctx = _Context(cfg, log)
    tok = ctx.loaded.tokenizer
    setup: dict[str, Any] = {
        "device": str(device),
        "scenarios": len(ctx.episodes),
        "skipped_scenarios": ctx.skipped,
        "stop_ids": list(ctx.stops),
        "tokenizer_vocab": len(tok),
    }

    trained_policy = False
    if cfg.weights:
        policy, vmap = load_weights(cfg.weights, device)
        trained_policy = True
        setup["policy"] = f"weights {cfg.weights}"
    else:
        vmap = VocabMap.full(len(tok)) if cfg.vocab == "full" else VocabMap.compact(_used_ids(ctx.episodes, ctx.stops))
        policy = build_small_model(vmap.size, cfg.arch, cfg.hidden, cfg.layers, seed=cfg.seed).to(device)
        setup["policy"] = f"random {cfg.arch} {cfg.layers}x{cfg.hidden}"
    setup["model_vocab"] = vmap.size
    setup["vocab"] = "full" if vmap.is_full else "compact"
    setup["parameters"] = sum(p.numel() for p in policy.parameters())
    setup["setup_seconds"] = time.perf_counter() - t0

    if cfg.warmup:
        tw = time.perf_counter()
        losses = warmup(policy, vmap, [e.buffer for e in ctx.episodes], cfg.warmup, cfg.warmup_lr, seed=cfg.seed)
        trained_policy = True
        setup["warmup"] = {
            "steps": cfg.warmup,
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "seconds": time.perf_counter() - tw,
        }
        log(f"warm-up: {cfg.warmup} SFT steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    if cfg.save_policy:
        save_policy(policy, vmap, tok, ctx.loaded.chat_template, cfg.save_policy)
        setup["saved_policy"] = cfg.save_policy
        log(f"policy saved to {cfg.save_policy}")

    sampled = trained_policy
    settings = GenerationSettings.parse(cfg.generation_kwargs, cfg.max_new_tokens)
    setup["sampling"] = asdict(settings) | {"pure": settings.pure} if sampled else "template (simulated rollouts)"
    meaningful = trained_policy and sampled
    setup["probability_diagnostics"] = "computed" if meaningful else dg.MEANINGLESS

    ref_dtype = torch.bfloat16 if (cfg.weights and device.type == "cuda") else None
    ref = clone_frozen(policy, ref_dtype)
    shadow = clone_frozen(policy) if cfg.shadow else None
    if shadow is not None:
        for p in shadow.parameters():
            p.requires_grad_(True)
    opt_cls = torch.optim.SGD if cfg.weights else torch.optim.Adam
    opt = opt_cls([p for p in policy.parameters() if p.requires_grad], lr=cfg.lr)
    shadow_opt = opt_cls(list(shadow.parameters()), lr=cfg.lr) if shadow is not None else None
    theta0 = _flat_params(policy) if shadow is not None else None
    gen = torch.Generator().manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)

    result = RLResult(config=asdict(cfg), setup=setup)
    n_batch = cfg.groups * cfg.group_size
    cursor = 0
    for step in range(cfg.steps):
        ts = time.perf_counter()
        # Episodes for this step.
        if sampled:
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
        adv = group_advantages(eps)
        sample_s = time.perf_counter() - ts

        # R first, then B, so that .grad holds B for the optimiser step.
        g_r = view_gradient(policy, vmap, [e.naive for e in eps], adv, chunk=cfg.chunk)
        g_b = view_gradient(policy, vmap, [e.buffer for e in eps], adv, stats=meaningful, chunk=cfg.chunk)
        rec: dict[str, Any] = {
            "step": step,
            "gradient": compare(g_b.flat, g_r.flat),
            "rewards": [e.reward for e in eps],
            "advantages": adv,
            "naive_crashes": sum(e.naive_error is not None for e in eps),
        }

        # Alignment and log-prob mismatch.
        per_seq = []
        dlogps: list[torch.Tensor] = []
        for e, tb, tr in zip(eps, g_b.tokens, g_r.tokens, strict=True):
            a = dg.alignment(e.buffer, e.naive)
            ib = {p: i for i, p in enumerate(tb.positions)}
            ir = {p: i for i, p in enumerate(tr.positions)}
            kept = [
                (ib[b], ir[r], k)
                for (b, r), k in zip(a.pop("pairs"), a.pop("pair_turns"), strict=True)
                if b in ib and r in ir
            ]
            d = torch.tensor([float(tr.logp[j] - tb.logp[i]) for i, j, _ in kept], dtype=torch.float64)
            dlogps.append(d)
            for k, row in enumerate(a["turns"]):
                dk = d[[n for n, (_, _, kk) in enumerate(kept) if kk == k]]
                row["aligned"] = int(dk.numel())
                row["abs_dlogp_max"] = float(dk.abs().max()) if dk.numel() else 0.0
                row["rho_min"] = float(dk.exp().min()) if dk.numel() else 1.0
                row["rho_max"] = float(dk.exp().max()) if dk.numel() else 1.0
            a["scenario"] = e.scenario_id
            a["dlogp_seq_sum"] = float(d.sum())
            per_seq.append(a)
        rec["alignment"] = dg.batch_alignment(per_seq)
        samp_tok = sum(e.sampled_tokens for e in eps) or 1
        rec["alignment"]["noncanonical_rate"] = sum(e.noncanonical_tokens for e in eps) / (
            samp_tok if not sampled else max(1, sum(sum(m["role"] == "assistant" for m in e.messages) for e in eps))
        )
        rec["alignment"]["noncanonical_unit"] = "turns" if sampled else "sampled tokens"
        rec["logp_mismatch"] = dg.logp_mismatch(dlogps, cfg.clip)
        rec["worst_sequences"] = sorted(per_seq, key=lambda s: -s["mismatched_trained"])[:3]

        if sampled:
            # Sampler vs trainer (bf16 sampling vs fp32 recompute on GPU; ~0 on CPU).
            diffs = [
                torch.tensor(
                    [
                        float(b.logp[i]) - float(e.rollout_logprobs[p])  # type: ignore[arg-type]
                        for i, p in enumerate(b.positions)
                        if e.rollout_logprobs[p] is not None
                    ]
                )
                for e, b in zip(eps, g_b.tokens, strict=True)
            ]
            rec["sampler_vs_trainer"] = dg.logp_mismatch(diffs, cfg.clip)

        if meaningful:
            ref_stats = [token_logps(ref, vmap, e.buffer, stats=True, grad=False, chunk=cfg.chunk)[1] for e in eps]
            rec["kl"] = kl_summary([b.logp for b in g_b.tokens], [r.logp for r in ref_stats])
            if rec["kl"]["negative_kl"]:
                rec["kl"]["warning"] = NEGATIVE_KL_EXPLANATION
            p_y = torch.cat([b.logp.exp() for b in g_b.tokens])
            p2 = torch.cat([b.sum_p2 for b in g_b.tokens if b.sum_p2 is not None])
            a_tok = torch.cat(
                [torch.full((len(b.positions),), a, dtype=torch.float64) for b, a in zip(g_b.tokens, adv, strict=True)]
            )
            rec["low_prob"] = dg.quartile_shares(p_y, p2, a_tok)
            texts = [
                ctx.renderer.token_texts([e.buffer.ids[p] for p in b.positions])
                for e, b in zip(eps, g_b.tokens, strict=True)
            ]
            rec["critical"] = dg.critical_tokens(
                [r.entropy for r in ref_stats if r.entropy is not None], vmap.size, texts, cfg.certainty_beta
            )
            rec["critical"]["scenarios"] = [e.scenario_id for e in eps]
        else:
            rec["probability_diagnostics"] = dg.MEANINGLESS
        rec["dlogp_values"] = [float(x) for d in dlogps for x in d]

        opt.step()
        if shadow is not None and shadow_opt is not None and theta0 is not None:
            g_s = view_gradient(shadow, vmap, [e.naive for e in eps], adv, chunk=cfg.chunk)
            del g_s
            shadow_opt.step()
            tb_, ts_ = _flat_params(policy), _flat_params(shadow)
            moved = float((tb_ - theta0).double().norm())
            rec["shadow_drift"] = float((tb_ - ts_).double().norm()) / moved if moved > 0 else None
        rec["seconds"] = time.perf_counter() - ts
        rec["sample_seconds"] = sample_s
        result.steps.append(rec)
        if progress:
            progress(step + 1, cfg.steps)

    result.summary = summarise(result)
    result.summary["total_seconds"] = time.perf_counter() - t0
    if cfg.out_dir:
        write_outputs(result, Path(cfg.out_dir), ctx.renderer, plots=cfg.plots)
    return result


def summarise(result: RLResult) -> dict[str, Any]:
    steps = result.steps
    cos = [s["gradient"]["cosine"] for s in steps if s["gradient"]["cosine"] is not None]
    err = [s["gradient"]["rel_error"] for s in steps if s["gradient"]["rel_error"] is not None]
    out: dict[str, Any] = {
        "cosine_min": min(cos) if cos else None,
        "cosine_mean": sum(cos) / len(cos) if cos else None,
        "rel_error_max": max(err) if err else None,
        "sequences_affected": sum(s["alignment"]["sequences_affected"] for s in steps),
        "sequences": sum(s["alignment"]["sequences"] for s in steps),
        "mismatched_trained": sum(s["alignment"]["mismatched_trained"] for s in steps),
        "flip_sampled_dropped": sum(s["alignment"]["flip_sampled_dropped"] for s in steps),
        "flip_template_trained": sum(s["alignment"]["flip_template_trained"] for s in steps),
        "abs_dlogp_max": max((s["logp_mismatch"].get("abs_dlogp_max", 0.0) for s in steps), default=0.0),
        "step_seconds_mean": sum(s["seconds"] for s in steps) / len(steps),
        "corrupted": bool(err) and max(err) > 0.0,
    }
    if "kl" in steps[0]:
        out["kl_k1_token_mean"] = [s["kl"]["k1_token_mean"] for s in steps]
        out["kl_k3_token_mean"] = [s["kl"]["k3_token_mean"] for s in steps]
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
