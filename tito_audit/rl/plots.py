"""PNG plots of an RL run (matplotlib, Agg backend): bars per scenario and per batch, never a line through
different batches (each step trains on other episodes, so consecutive steps are no trend). Batch axes have
integer ticks; the tolerance line stays visible when it is 0; long-tailed values get a log axis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tito_audit.rl.result import RLResult


def _batch_axis(ax: Any, steps: list[dict[str, Any]]) -> None:
    ax.set_xticks([s["step"] for s in steps])
    ax.set_xlabel("batch")


class _Saver:
    """Lays out, writes and closes each figure into ``out``, keeping the list of files written."""

    def __init__(self, plt: Any, out: Path) -> None:
        self.plt, self.out = plt, out
        self.files: list[Path] = []

    def __call__(self, fig: Any, name: str) -> None:
        fig.tight_layout()
        self.files.append(self.out / name)
        fig.savefig(self.files[-1], dpi=100)
        self.plt.close(fig)


def _token_facts(plt: Any, save: _Saver, result: RLResult, title: str) -> None:
    facts = result.setup.get("sampled_token_facts") or result.setup["token_facts"]
    rows = facts["by_scenario"]
    names = list(rows)
    fig, ax = plt.subplots(figsize=(max(8, 0.28 * len(names) + 2), 4))
    xs = list(range(len(names)))
    w = 0.21
    for off, key, label in (
        (-1.5 * w, "mismatched_trained", "trained tokens without partner"),
        (-0.5 * w, "flip_sampled_dropped", "sampled token dropped"),
        (0.5 * w, "flip_template_trained", "template token trained"),
        (1.5 * w, "context_changed_trained", "trained token, context changed"),
    ):
        ax.bar([x + off for x in xs], [rows[n].get(key, 0) for n in names], w, label=label)
    ax.set_xticks(xs, names, rotation=90, fontsize=7)
    ax.set_ylabel("tokens (summed over episodes)")
    ax.set_title(f"{title}: what R changes, per scenario (model-free)")
    ax.legend(fontsize=7)
    save(fig, "token_facts.png")


def _gradient(plt: Any, save: _Saver, result: RLResult, title: str) -> None:
    steps = result.steps
    fig, ax = plt.subplots(figsize=(6, 3.5))
    errs = [s["gradient"]["rel_error"] for s in steps]
    tol = result.summary.get("identical_tolerance", 0.0)
    ax.bar(
        [s["step"] for s in steps],
        [e if e is not None else 0.0 for e in errs],
        0.6,
        label="||g_R - g_B|| / ||g_B|| at A = 1 (one batch each)",
    )
    for s, e in zip(steps, errs, strict=True):
        note = "nothing compared" if e is None else ("bitwise equal" if s["gradient"].get("bitwise_equal") else "")
        if note:
            ax.annotate(note, (s["step"], 0), ha="center", va="bottom", fontsize=7)
    ax.axhline(tol, color="red", lw=2, ls="--", label=f"identical if <= {tol:.2g} (10 x noise floor)")
    ax.set_ylim(bottom=0, top=max([tol, *[e for e in errs if e is not None]], default=0.0) * 1.2 or 1.0)
    _batch_axis(ax, steps)
    ax.set_title(f"{title}: gradient B vs R per batch")
    ax.legend(fontsize=7)
    save(fig, "gradient.png")


def _dlogp(plt: Any, save: _Saver, result: RLResult, title: str) -> None:
    vals = [v for s in result.steps for v in s.get("dlogp_values", [])]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if vals:
        ax.hist(vals, bins=50)
        ax.set_yscale("log")
    ax.set_xlabel("logp_R - logp_B (trained tokens aligned within their turn)")
    ax.set_ylabel("tokens (log scale)")
    ax.set_title(f"{title}: log-prob mismatch")
    save(fig, "dlogp_hist.png")


def _kl(plt: Any, save: _Saver, result: RLResult, title: str) -> None:
    steps = result.steps
    if not steps or not all("kl" in s for s in steps):
        return
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bars = [("k1", "k1 token mean"), ("k3", "k3 token mean"), ("exact", "exact KL")]
    width = 0.8 / (len(bars) + 1)
    for i, (k, label) in enumerate(bars):
        ax.bar(
            [s["step"] - 0.4 + (i + 0.5) * width for s in steps],
            [s["kl"][f"{k}_mean"] for s in steps],
            width,
            yerr=[(s["kl"]["t_quantile"] or 0.0) * s["kl"][f"{k}_se"] for s in steps],
            label=f"{label} (± t SE)",
        )
    ax.bar(
        [s["step"] - 0.4 + (len(bars) + 0.5) * width for s in steps],
        [s["kl"].get("bias", {}).get("expected_k3", 0.0) for s in steps],
        width,
        label="E_q[k3] under the sampler (exact)",
    )
    ax.axhline(0, color="grey", lw=0.5)
    if all(s["kl"]["exact_mean"] == 0.0 for s in steps):
        ax.text(
            0.5,
            0.5,
            "exact KL 0 in every batch: the reference is the policy (give --ref)",
            transform=ax.transAxes,
            ha="center",
            fontsize=8,
        )
    _batch_axis(ax, steps)
    ax.set_title(f"{title}: KL to reference")
    ax.legend(fontsize=7)
    save(fig, "kl.png")


def _quartiles(plt: Any, save: _Saver, result: RLResult, title: str) -> None:
    steps = result.steps
    if not steps or not all("positive" in s.get("low_prob", {}) for s in steps):
        return
    fig, axes = plt.subplots(len(steps), 2, figsize=(9, 2.6 * len(steps) + 0.6), squeeze=False, sharey=True)
    for row, s in zip(axes, steps, strict=True):
        for ax, sign, label in ((row[0], "positive", "A > 0"), (row[1], "negative", "A < 0")):
            qs = s["low_prob"][sign]["quartiles"]
            ax.bar(range(len(qs)), [q["mean_grad_norm"] for q in qs], 0.6)
            if not qs:
                ax.text(0.5, 0.5, f"no token with {label}", transform=ax.transAxes, ha="center", fontsize=8)
            ax.set_xticks(range(len(qs)), [f"p {q['p_min']:.3g}-{q['p_max']:.3g}" for q in qs], fontsize=7)
            ax.set_title(f"batch {s['step']}, {label}: quartiles of p", fontsize=9)
        row[0].set_ylabel("mean ||e_y - pi||")
    fig.suptitle(f"{title}: per-token logit gradient by p quartile (real p ranges)", fontsize=10)
    save(fig, "quartiles.png")


PLOTS = (_token_facts, _gradient, _dlogp, _kl, _quartiles)


def write_plots(result: RLResult, out: Path) -> list[Path]:
    """Every plot the run's figures allow, in ``out``; the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    save = _Saver(plt, out)
    for plot in PLOTS:
        plot(plt, save, result, result.config["model"])
    return list(save.files)
