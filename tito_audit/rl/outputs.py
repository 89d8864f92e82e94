"""What a run reports once its steps are done: the summary over the steps, ``metrics.json`` and the plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tito_audit.rendering.renderer import Renderer
from tito_audit.report.rl_verdict import NOISE_FACTOR, decide
from tito_audit.rl.result import RLResult

__all__ = ["NOISE_FACTOR", "summarise", "write_outputs"]


def _verdict_part(verdict: dict[str, Any]) -> dict[str, Any]:
    keys = ("verdict", "exit_code", "headline", "holds_for", "reasons", "what_to_do")
    out = {k: verdict[k] for k in keys}
    out["corrupted"] = verdict["verdict"] == "corrupted"
    out["filtered"] = verdict["filtered"]
    return out


_FACT_COUNTS = (
    "sequences_affected",
    "sequences",
    "mismatched_trained",
    "flip_sampled_dropped",
    "flip_template_trained",
    "context_changed_trained",
    "shape_mismatch_sequences",
)


def _gradient_part(steps: list[dict[str, Any]], tolerance: float) -> dict[str, Any]:
    """The gradient comparison over the batches: cosines, relative errors, the noise floor and the tolerance."""
    cos = [s["gradient"]["cosine"] for s in steps if s["gradient"]["cosine"] is not None]
    err = [s["gradient"]["rel_error"] for s in steps if s["gradient"]["rel_error"] is not None]
    return {
        "cosine_min": min(cos) if cos else None,
        "cosine_mean": sum(cos) / len(cos) if cos else None,
        "rel_error_max": max(err) if err else None,
        "noise_floor": max((s["noise_floor"] for s in steps), default=0.0),
        "identical_tolerance": tolerance,
        "abs_dlogp_max": max((s["logp_mismatch"].get("abs_dlogp_max", 0.0) for s in steps), default=0.0),
        "step_seconds_mean": sum(s["seconds"] for s in steps) / len(steps) if steps else 0.0,
    }


def _kl_part(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The KL estimators per batch, when every batch computed them."""
    if not steps or not all("kl" in s for s in steps):
        return {}
    out: dict[str, Any] = {}
    for k in ("k1", "k3", "exact"):
        out[f"kl_{k}_mean"] = [s["kl"][f"{k}_mean"] for s in steps]
        out[f"kl_{k}_se"] = [s["kl"][f"{k}_se"] for s in steps]
    out["kl_bias_k3"] = [s["kl"].get("bias", {}).get("bias_k3") for s in steps]
    out["negative_kl_steps"] = [s["step"] for s in steps if s["kl"]["negative_kl"]]
    return out


def summarise(result: RLResult) -> dict[str, Any]:
    steps = result.steps
    facts = result.setup.get("sampled_token_facts") or result.setup["token_facts"]
    calls = [s["tool_calls"] for s in steps]
    expected = sum(c["turns_expected"] for c in calls)
    verdict = decide(steps, result.setup, result.config)
    out: dict[str, Any] = _verdict_part(verdict)
    out["scenarios_played"] = len({sc for s in steps for sc in s["scenarios"]})
    out |= {k: facts[k] for k in _FACT_COUNTS}
    # Two parse rates: every scenario's template turns (canonical ids), and the turns of the batches played.
    out["parse_rate_every_scenario"] = result.setup.get("template_parse_rate")
    out["parse_rate_batches"] = (sum(c["turns_parsed"] for c in calls) / expected) if expected else None
    out["parse_rate_batches_steps"] = [s["step"] for s in steps]
    out |= _gradient_part(steps, verdict["tolerance"])
    if "control_passed" in verdict:
        out["control_passed"] = verdict["control_passed"]
    out |= _kl_part(steps)
    if steps and "shadow_drift" in steps[-1]:
        out["shadow_drift_final"] = steps[-1]["shadow_drift"]
    out |= {
        key: result.setup[key]
        for key in ("peak_gpu_memory_gb", "peak_bytes_per_parameter_beyond_weights")
        if key in result.setup
    }
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
