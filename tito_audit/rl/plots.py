"""PNG plots of an RL run (matplotlib, Agg backend): bars per scenario and per batch, never a line through
different batches (each step trains on other episodes, so consecutive steps are no trend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tito_audit.rl.result import RLResult


def write_plots(result: RLResult, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[Path] = []
    steps = result.steps
    title = result.config["model"]

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        files.append(out / name)
        fig.savefig(files[-1], dpi=100)
        plt.close(fig)

    facts = result.setup.get("sampled_token_facts") or result.setup["token_facts"]
    rows = facts["by_scenario"]
    names = list(rows)
    fig, ax = plt.subplots(figsize=(max(6, 0.28 * len(names) + 2), 4))
    xs = list(range(len(names)))
    w = 0.28
    for off, key, label in (
        (-w, "mismatched_trained", "trained tokens without partner"),
        (0.0, "flip_sampled_dropped", "sampled token dropped"),
        (w, "flip_template_trained", "template token trained"),
    ):
        ax.bar([x + off for x in xs], [rows[n][key] for n in names], w, label=label)
    ax.set_xticks(xs, names, rotation=90, fontsize=7)
    ax.set_ylabel("tokens (summed over episodes)")
    ax.set_title(f"{title}: what R changes, per scenario (model-free)")
    ax.legend(fontsize=7)
    save(fig, "token_facts.png")

    fig, ax = plt.subplots(figsize=(6, 3.5))
    errs = [s["gradient"]["rel_error"] if s["gradient"]["rel_error"] is not None else 0.0 for s in steps]
    ax.bar([s["step"] for s in steps], errs, 0.6, label="||g_R - g_B|| / ||g_B|| (one batch each)")
    ax.axhline(result.summary.get("identical_tolerance", 0.0), color="red", lw=0.8, label="noise tolerance")
    ax.set_xlabel("batch")
    ax.set_title(f"{title}: gradient B vs R per batch")
    ax.legend(fontsize=7)
    save(fig, "gradient.png")

    vals = [v for s in steps for v in s.get("dlogp_values", [])]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if vals:
        ax.hist(vals, bins=50)
    ax.set_xlabel("logp_R - logp_B (trained tokens aligned within their turn)")
    ax.set_title(f"{title}: log-prob mismatch")
    save(fig, "dlogp_hist.png")

    if all("kl" in s for s in steps):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for off, k in ((-0.25, "k1"), (0.0, "k3"), (0.25, "exact")):
            ax.bar(
                [s["step"] + off for s in steps],
                [s["kl"][f"{k}_mean"] for s in steps],
                0.25,
                yerr=[2 * s["kl"][f"{k}_se"] for s in steps],
                label=f"{k} (±2 SE)",
            )
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xlabel("batch")
        ax.set_title(f"{title}: KL to reference (token mean)")
        ax.legend(fontsize=7)
        save(fig, "kl.png")
    if all("quartile_grad_norm" in s.get("low_prob", {}) for s in steps):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        width = 0.8 / len(steps)
        for i, s in enumerate(steps):
            ax.bar(
                [q + i * width for q in range(4)],
                s["low_prob"]["quartile_grad_norm"],
                width,
                label=f"batch {s['step']}",
            )
        ax.set_xticks([q + 0.4 - width / 2 for q in range(4)], ["Q1 (low p)", "Q2", "Q3", "Q4 (high p)"])
        ax.set_ylabel("parameter-gradient norm of the group")
        ax.set_title(f"{title}: gradient per p quartile")
        ax.legend(fontsize=7)
        save(fig, "quartiles.png")
    return files
