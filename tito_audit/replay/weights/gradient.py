"""The policy gradient on what the trainer trained on against the one on the reference buffer, per episode.

Both at a fixed advantage (A = 1, each sequence normalised by its own trained ids, as ``tito-audit rl`` does), so
that reward noise plays no part: a group of equal rewards has A = 0 in GRPO and would make any two gradients
"equal". The comparison is ``tito_audit.policy.gradient_compare``'s streamed one: the trained sequence's gradient is
held, the buffer's is compared parameter by parameter as its backward produces it and dropped, so at most two
gradients are alive. "Identical" is bitwise, or within 10 x the noise floor: the relative difference between two
computations of the same gradient on the same device, measured once per run (0 on CPU).

Parameters are grouped by what they belong to, read from the model's modules: its input embedding, its output
layer (when not tied), attention, MLP (feed-forward, experts), normalisation, other. Per group: its share of
||g_buffer - g_trained||^2, and its own relative error.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tito_audit.policy.gradient_compare import GradientComparison, compare_with, hold_gradient, trainable
from tito_audit.policy.gradients import surrogate_pass
from tito_audit.policy.model import VocabMap
from tito_audit.policy.view import View
from tito_audit.replay.weights.pairs import Pair

NOISE_FACTOR = 10.0
MAX_KEPT = 200  # per-episode entries kept in the report (counts cover every episode)
GROUPS = ("embedding", "head", "attention", "mlp", "norm", "other")


def parameter_groups(model: Any) -> list[str]:
    """The group of each trainable parameter, in ``trainable(model)`` order."""
    modules = dict(model.named_modules())
    emb = model.get_input_embeddings()
    head = model.get_output_embeddings()
    by_param: dict[int, str] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in by_param:
            continue
        parts = name.split(".")[:-1]
        chain = [modules.get(".".join(parts[: k + 1])) for k in range(len(parts))]
        owner = chain[-1] if chain else model
        classes = [type(m).__name__.lower() for m in chain if m is not None]
        if owner is emb:
            group = "embedding"
        elif owner is head:
            group = "head"
        elif any("attention" in c for c in classes):
            group = "attention"
        elif any(w in c for c in classes for w in ("mlp", "feedforward", "experts", "moe")):
            group = "mlp"
        elif "norm" in type(owner).__name__.lower():
            group = "norm"
        else:
            group = "other"
        by_param[id(p)] = group
    return [by_param[id(p)] for p in trainable(model)]


@dataclass
class GradientTotals:
    compared: int = 0
    identical: int = 0
    bitwise: int = 0
    not_compared: Counter[str] = field(default_factory=Counter)
    not_compared_first: dict[str, str] = field(default_factory=dict)  # reason -> first episode's label
    noise_floor: float | None = None
    cos_min: float | None = None
    rel_max: float | None = None
    rel_sum: float = 0.0  # over episodes whose gradient differs
    differ: int = 0
    group_dd: dict[str, float] = field(default_factory=dict)  # summed over episodes whose gradient differs
    group_aa: dict[str, float] = field(default_factory=dict)
    kept: list[dict[str, Any]] = field(default_factory=list)  # differing episodes (the first MAX_KEPT)
    same_input_differs: int = 0  # identical inputs whose gradients differ beyond the tolerance (never expected)

    @property
    def tolerance(self) -> float:
        return NOISE_FACTOR * (self.noise_floor or 0.0)

    def skip(self, pair: Pair, why: str) -> None:
        self.not_compared[why] += 1
        self.not_compared_first.setdefault(why, pair.label)

    def add(self, pair: Pair, cmp: GradientComparison, groups: list[str]) -> None:
        self.compared += 1
        rel = cmp.rel_error if cmp.rel_error is not None else 0.0
        cos = cmp.cosine if cmp.cosine is not None else 0.0
        self.bitwise += cmp.bitwise_equal
        if cmp.bitwise_equal or rel <= self.tolerance:
            self.identical += 1
            return
        self.differ += 1
        self.same_input_differs += pair.same_input
        self.rel_sum += rel
        self.cos_min = cos if self.cos_min is None else min(self.cos_min, cos)
        self.rel_max = rel if self.rel_max is None else max(self.rel_max, rel)
        dd: dict[str, float] = {}
        for g, s in zip(groups, cmp.parts, strict=True):
            dd[g] = dd.get(g, 0.0) + s.dd
            self.group_dd[g] = self.group_dd.get(g, 0.0) + s.dd
            self.group_aa[g] = self.group_aa.get(g, 0.0) + s.aa
        if len(self.kept) < MAX_KEPT:
            total = sum(dd.values()) or 1.0
            top = max(dd, key=lambda g: dd[g]) if dd else None
            self.kept.append(
                {
                    "episode": pair.label,
                    "line": pair.line,
                    "class": pair.first_class,
                    "cosine": cos,
                    "rel_error": rel,
                    "norm_trained": cmp.norm_a,
                    "norm_buffer": cmp.norm_b,
                    "top_group": top,
                    "top_group_share": dd[top] / total if top else None,
                }
            )

    def to_dict(self) -> dict[str, Any]:
        total = sum(self.group_dd.values())
        return {
            "compared": self.compared,
            "identical": self.identical,
            "bitwise_equal": self.bitwise,
            "differ": self.differ,
            "not_compared": dict(sorted(self.not_compared.items())),
            "noise_floor": self.noise_floor,
            "tolerance": self.tolerance if self.noise_floor is not None else None,
            "cosine_min": self.cos_min,
            "rel_error_max": self.rel_max,
            "rel_error_mean": self.rel_sum / self.differ if self.differ else None,
            "groups": {
                g: {
                    "share": self.group_dd[g] / total if total > 0 else None,
                    "rel_error": (self.group_dd[g] / self.group_aa[g]) ** 0.5 if self.group_aa.get(g) else None,
                }
                for g in GROUPS
                if g in self.group_dd
            },
            "episodes": self.kept,
        }


def views(pair: Pair) -> tuple[View, View]:
    return View(pair.trained_ids, pair.trained_mask), View(pair.buffer_ids, pair.buffer_mask)


def not_comparable(pair: Pair) -> str | None:
    """Why this pair's gradients cannot be compared, or None."""
    if not pair.built:
        return pair.why_not
    if not pair.trained_positions:
        return "nothing trained: no loss_mask 1 after the first id"
    if not pair.sampled_positions:
        return "nothing sampled after the first id of the buffer"
    return None


def noise_floor(model: Any, vmap: VocabMap, pair: Pair) -> float:
    """The relative difference between two computations of the trained sequence's gradient."""
    trained, _ = views(pair)
    params = trainable(model)
    held = hold_gradient(params, surrogate_pass(model, vmap, [trained], [1.0]))
    cmp = compare_with(held, surrogate_pass(model, vmap, [trained], [1.0]))
    return cmp.rel_error or 0.0


def compare_pair(model: Any, vmap: VocabMap, pair: Pair) -> GradientComparison:
    """g(trained sequence) held, g(buffer) compared with it as its backward produces it."""
    trained, buffer = views(pair)
    params = trainable(model)
    held = hold_gradient(params, surrogate_pass(model, vmap, [trained], [1.0]))
    return compare_with(held, surrogate_pass(model, vmap, [buffer], [1.0]))
