"""Quality gates: the probability diagnostics describe a policy only when the policy has learnt the format.

Measured on the first batch a trained policy samples (after ``--warmup`` or with ``--weights``). Thresholds and
why (README, "warm-up that proves itself"):

- final SFT loss <= 1.0 nat per trained token (warm-up only): above it the model has not learnt the
  conversations it is asked to continue, and its samples are mostly noise;
- canonical turns >= 90 %: a non-canonical sample is re-encoded differently by R whatever the template does,
  so the B/R comparison would measure the sampler, not the template;
- tool-call parse rate >= 80 % of the turns that should call a tool (skipped when the template shows no
  calls): rewards, critical tokens and the R path all rest on calls that parse;
- tokens with p < 0.5 <= 50 %: Lopti's and the critical-token analyses split tokens by probability; when most
  sampled tokens are improbable the policy is still near the random-weight regime (p ~ 1/|V|).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_SFT_LOSS = 1.0
MIN_CANONICAL = 0.9
MIN_PARSE_RATE = 0.8
MAX_LOW_P = 0.5


@dataclass
class QualityGates:
    sft_loss: float | None  # None with --weights (no warm-up)
    measured: dict[str, Any] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    checked: bool = False

    def measure(self, step_record: dict[str, Any]) -> None:
        """Read the first sampled step's own figures and decide."""
        canonical = step_record.get("canonical_turn_fraction")
        parse = step_record["tool_calls"]["rate"]
        low = step_record.get("p_below_eta_fraction")
        self.measured = {
            "sft_loss_final": self.sft_loss,
            "canonical_turn_fraction": canonical,
            "tool_call_parse_rate": parse,
            "p_below_0.5_fraction": low,
        }
        checks = [
            ("sft_loss_final", self.sft_loss, lambda v: v <= MAX_SFT_LOSS, f"<= {MAX_SFT_LOSS}"),
            ("canonical_turn_fraction", canonical, lambda v: v >= MIN_CANONICAL, f">= {MIN_CANONICAL}"),
            ("tool_call_parse_rate", parse, lambda v: v >= MIN_PARSE_RATE, f">= {MIN_PARSE_RATE}"),
            ("p_below_0.5_fraction", low, lambda v: v <= MAX_LOW_P, f"<= {MAX_LOW_P}"),
        ]
        self.failed = [
            f"{name} {value:.3g} (needs {need})"
            for name, value, ok, need in checks
            if value is not None and not ok(value)
        ]
        self.checked = True

    @property
    def passed(self) -> bool:
        return self.checked and not self.failed

    def failed_line(self) -> str:
        return "quality gates failed: " + "; ".join(self.failed) if self.failed else "quality gates passed"

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "failed": self.failed,
            "measured": self.measured,
            "thresholds": {
                "sft_loss_final_max": MAX_SFT_LOSS,
                "canonical_turn_fraction_min": MIN_CANONICAL,
                "tool_call_parse_rate_min": MIN_PARSE_RATE,
                "p_below_0.5_fraction_max": MAX_LOW_P,
            },
        }
