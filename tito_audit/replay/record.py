"""Write a native replay record from a ``Trajectory``: what a correct loop should log per episode."""

from __future__ import annotations

from typing import Any

from tito_audit.rollout.buffer import Trajectory


def record_from_trajectory(traj: Trajectory, episode_id: str = "", **extra: Any) -> dict[str, Any]:
    """``turns`` (sampled ids and logprobs per assistant turn), ``input_ids``/``loss_mask``, ``messages``, ``tools``.

    A turn streamed in several chunks is one turn. ``extra`` keys (e.g. ``chat_template_kwargs``) are added.
    """
    turns: list[dict[str, Any]] = []
    prev_end = None
    for seg in traj.segments:
        if seg.kind != "sampled":
            prev_end = None if seg.kind != "sampled" else prev_end
            continue
        ids = traj.input_ids[seg.start : seg.end]
        lps = traj.logprobs[seg.start : seg.end]
        if prev_end == seg.start and turns:  # continuation of a truncated turn
            turns[-1]["ids"].extend(ids)
            turns[-1]["logprobs"].extend(lps)
        else:
            turns.append({"ids": list(ids), "logprobs": list(lps)})
        prev_end = seg.end
    for t in turns:
        if any(lp is None for lp in t["logprobs"]):
            del t["logprobs"]
    out: dict[str, Any] = {
        "turns": turns,
        "input_ids": list(traj.input_ids),
        "loss_mask": list(traj.loss_mask),
        "messages": traj.messages,
    }
    if episode_id:
        out["id"] = episode_id
    if traj.tools:
        out["tools"] = traj.tools
    if traj.renderer.template_kwargs:
        out["chat_template_kwargs"] = dict(traj.renderer.template_kwargs)
    out.update(extra)
    return out
