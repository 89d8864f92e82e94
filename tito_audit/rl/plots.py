"""PNG plots of an RL run (matplotlib, Agg backend)."""

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
    xs = [s["step"] for s in steps]
    title = result.config["model"]

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        files.append(out / name)
        fig.savefig(files[-1], dpi=100)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(
        xs,
        [s["gradient"]["cosine"] if s["gradient"]["cosine"] is not None else float("nan") for s in steps],
        "o-",
        label="cosine(g_B, g_R)",
    )
    ax.plot(
        xs,
        [s["gradient"]["rel_error"] if s["gradient"]["rel_error"] is not None else float("nan") for s in steps],
        "s-",
        label="||g_R - g_B|| / ||g_B||",
    )
    ax.set_xlabel("step")
    ax.set_title(f"{title}: gradient B vs R")
    ax.legend()
    save(fig, "gradient.png")

    vals = [v for s in steps for v in s.get("dlogp_values", [])]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if vals:
        ax.hist(vals, bins=50)
    ax.set_xlabel("logp_R - logp_B (aligned trained tokens)")
    ax.set_title(f"{title}: log-prob mismatch")
    save(fig, "dlogp_hist.png")

    if all("kl" in s for s in steps):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(xs, [s["kl"]["k1_token_mean"] for s in steps], "o-", label="k1")
        ax.plot(xs, [s["kl"]["k3_token_mean"] for s in steps], "s-", label="k3")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xlabel("step")
        ax.set_title(f"{title}: KL to reference (token mean)")
        ax.legend()
        save(fig, "kl.png")
    if all("share" in s.get("low_prob", {}) for s in steps):
        fig, ax = plt.subplots(figsize=(6, 3.5))
        width = 0.8 / len(steps)
        for i, s in enumerate(steps):
            ax.bar([q + i * width for q in range(4)], s["low_prob"]["share"], width, label=f"step {s['step']}")
        ax.set_xticks([q + 0.4 - width / 2 for q in range(4)], ["Q1 (low p)", "Q2", "Q3", "Q4 (high p)"])
        ax.set_ylabel("share of logit-gradient norm")
        ax.set_title(f"{title}: gradient share per p quartile")
        ax.legend(fontsize=7)
        save(fig, "quartiles.png")
    crit = steps[-1].get("critical")
    if crit and crit.get("J"):
        j = crit["J"][0][:120]
        fig, ax = plt.subplots(figsize=(10, 1.6))
        ax.imshow([j], aspect="auto", cmap="viridis", vmin=min(j), vmax=max(j))
        ax.set_yticks([])
        ax.set_xlabel(f"trained tokens of {crit['scenarios'][0]} (colour = certainty J under the reference)")
        save(fig, "certainty_strip.png")
    return files
