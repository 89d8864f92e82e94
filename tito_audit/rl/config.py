"""What one ``tito-audit rl`` run is asked to do, and the usage errors a bad combination gets before any work.

``validate`` needs neither torch nor the model: the CLI calls it before it imports either, so a bad ``--steps``,
``--generation-kwargs``, ``--device`` or ``--dtype`` costs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tito_audit.errors import UsageError
from tito_audit.policy.generation import GenerationSettings

DTYPES = ("float32", "bfloat16")
_DEVICE = re.compile(r"auto|cpu|cuda(:\d+)?")


@dataclass
class RLConfig:
    model: str
    steps: int = 3
    device: str = "auto"
    weights: str | None = None
    ref: str | None = None  # a separate reference checkpoint for the KL section (default: the step-0 policy)
    dtype: str = "float32"  # the policy's (and its gradients') precision
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
    scenarios: tuple[str, ...] = ()  # scenario id prefixes: the scenarios played (token facts cover them all)
    thinking: str = "both"  # the reasoning modes played, as ``audit --thinking`` (AuditOptions.thinking)
    # the counterexample search ``audit`` runs (``audit.search``): its conversations join the token facts
    search: int = 40  # AuditOptions.search's default (SEARCH_BUDGET; a test holds them equal)
    search_seed: int = 0
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # ``-k KEY=VALUE``, passed to every render
    clip: float = 2.0  # truncated importance sampling C
    control: bool = False  # R := B (the exactness control)
    out_dir: str | None = None
    plots: bool = True
    eta: float = 0.5  # Lopti's probability threshold
    alpha: float = 0.3  # Advantage Reweighting's alpha
    critical_budget: int = 24  # positions per step tested for critical tokens
    critical_beta: float = 150.0  # the prioritised KL weight J^beta (Vassoyan et al.'s beta)
    rollouts: str = "auto"  # auto (sample when the policy is trained) | sample | template

    def validate(self) -> None:
        if self.steps < 1:
            raise UsageError("rl", f"--steps must be >= 1 (got {self.steps})")
        if self.warmup < 0:
            raise UsageError("rl", "--warmup must be >= 0")
        if not _DEVICE.fullmatch(self.device):
            raise UsageError("rl", f"--device must be auto, cpu, cuda or cuda:N (got {self.device!r})")
        if self.dtype not in DTYPES:
            raise UsageError("rl", f"--dtype must be {' or '.join(DTYPES)} (got {self.dtype!r})")
        if not 0.0 <= self.noncanonical_rate <= 1.0:
            raise UsageError("rl", "--noncanonical-rate must be in [0, 1]")
        if self.groups < 1 or self.group_size < 2:
            raise UsageError("rl", "need --groups >= 1 and --group-size >= 2 (GRPO normalises within a group)")
        from tito_audit.audit.context import THINKING  # no torch, no model: the values AuditOptions.thinking takes

        if self.thinking not in THINKING:
            raise UsageError("rl", f"--thinking must be {', '.join(THINKING)} (got {self.thinking!r})")
        if self.vocab not in ("compact", "full"):
            raise UsageError("rl", "--vocab must be compact or full")
        if self.weights and self.warmup:
            raise UsageError("rl", "--warmup trains the small random model; it cannot be combined with --weights")
        if self.clip <= 1.0:
            raise UsageError("rl", "--clip must be > 1")
        if self.max_new_tokens < 1:
            raise UsageError("rl", "--max-new-tokens must be >= 1")
        if self.rollouts not in ("auto", "sample", "template"):
            raise UsageError("rl", "--rollouts must be auto, sample or template")
        samples = bool(self.weights or self.warmup) and self.rollouts != "template"
        if self.rollouts == "sample" and not (self.weights or self.warmup):
            raise UsageError("rl", "--rollouts sample needs a policy that can sample: add --warmup N or --weights PATH")
        if self.generation_kwargs and not samples:
            raise UsageError(
                "rl",
                "--generation-kwargs sets how a policy samples, but nothing is sampled without a policy (the "
                "template stands in for the model): add --warmup N or --weights PATH",
            )
        if self.ref and not samples:
            raise UsageError(
                "rl",
                "--ref is the reference of the KL section, which needs the policy's own samples: add --warmup N or "
                "--weights PATH (and not --rollouts template)",
            )
        self.generation_settings()  # a bad --generation-kwargs fails here, before anything is loaded

    def generation_settings(self) -> GenerationSettings:
        return GenerationSettings.parse(self.generation_kwargs, self.max_new_tokens)
