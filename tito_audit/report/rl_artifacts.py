"""What ``tito-audit rl --out DIR`` leaves behind, read back without torch: the metrics and the plots that
``tito-audit audit --format html --rl-dir DIR`` embeds. Reading the folder happens here, on the caller's side;
the HTML formatter only receives the data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RL_METRICS = "metrics.json"
# The plots ``rl/plots.py`` writes, in its order; any other PNG in the folder follows alphabetically.
RL_PLOTS = ("token_facts.png", "gradient.png", "dlogp_hist.png", "kl.png", "quartiles.png")


@dataclass
class RLArtifacts:
    """What ``tito-audit rl --out DIR`` left behind: its metrics and its plots (name -> PNG bytes)."""

    metrics: dict[str, Any]
    plots: dict[str, bytes]


def read_rl_dir(folder: Path) -> RLArtifacts:
    """Raises ``ValueError`` with a one-line cause when the folder is not an RL output folder."""
    folder = Path(folder)
    metrics_path = folder / RL_METRICS
    if not metrics_path.is_file():
        raise ValueError(f"--rl-dir {folder}: no {RL_METRICS} (write one with `tito-audit rl MODEL --out DIR`)")
    try:
        metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--rl-dir {folder}: {RL_METRICS} is not valid JSON ({exc})") from None
    if not isinstance(metrics, dict):
        raise ValueError(f"--rl-dir {folder}: {RL_METRICS} is not a JSON object")
    names = [n for n in RL_PLOTS if (folder / n).is_file()]
    names += sorted(p.name for p in folder.glob("*.png") if p.name not in names)
    plots = {}
    for name in names:
        data = (folder / name).read_bytes()
        if data.startswith(PNG_MAGIC):  # only real PNGs go into a data: URI
            plots[name] = data
    return RLArtifacts(metrics, plots)


def check_same_template(rl: RLArtifacts, folder: Path, template_sha256s: list[str]) -> None:
    """Refuse an RL folder written for another model: its template must be one of the audited templates.

    Raises ``ValueError`` with a one-line cause (also for a folder that does not say which template it ran,
    written before ``tito-audit rl`` recorded it: embedding it could show another model's verdict)."""
    setup = rl.metrics.get("setup") or {}
    sha = setup.get("template_sha256")
    model = (rl.metrics.get("config") or {}).get("model", "?")
    if not sha:
        raise ValueError(
            f"--rl-dir {folder}: {RL_METRICS} does not say which template it ran ({model}); rerun `tito-audit rl`"
        )
    if sha not in template_sha256s:
        raise ValueError(
            f"--rl-dir {folder}: a run of {model} (template sha256 {sha[:12]}), not of any audited model's template"
        )
