"""What a run reports once its steps are done: the summary over the steps, ``metrics.json`` and the plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tito_audit.rendering.renderer import Renderer
from tito_audit.rl.result import RLResult

# R is "identical" to B when its relative error is within this many times the measured noise floor (the
# relative difference between two computations of the same B gradient on the same device).
NOISE_FACTOR = 10.0


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
