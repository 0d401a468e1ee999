"""The figures of docs/credit.md's ceiling section (``ceiling_page.py`` draws them after it has
written the page): every arm's learning curve against the ceiling, and credit agreement against
the share of the ceiling."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def _mean_curve(
    runs: list[dict], x_key, skip: int, primary: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds of the pass@1 gain over the seed's warm start, on the evaluations
    every run has (from the ``skip``-th: the log-scale panel has no place for 0 tokens)."""
    n = min(len(r["evals"]) for r in runs)
    x = np.mean([[x_key(e) for e in r["evals"][skip:n]] for r in runs], axis=0)
    y = np.array([[e[primary] - r["evals"][0][primary] for e in r["evals"][skip:n]]
                  for r in runs])  # fmt: skip
    se = y.std(axis=0, ddof=1) / math.sqrt(len(runs)) if len(runs) > 1 else np.zeros(y.shape[1])
    return x, y.mean(axis=0), se


def curves(arms: dict, out: Path, order, names: dict, ceiling: str, primary: str) -> Path:
    """Every arm's mean pass@1 gain over updates and over all sampled tokens (the ceiling in
    black, ± 1 s.e.)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    axes_keys = (
        (lambda e: e["step"], "policy updates"),
        (lambda e: (e["sampled_tokens"] + e["value_sampled_tokens"]) / 1e6,
         "all sampled tokens, millions (VinePPO's values included; log scale)"),
    )  # fmt: skip
    for skip, ax, (x_key, xlabel) in zip((0, 1), axes, axes_keys):
        ax.axhline(0, color="grey", lw=0.8, ls=":")
        for label in order:
            runs = list(arms.get(label, {}).values())
            if not runs:
                continue
            x, y, se = _mean_curve(runs, x_key, skip, primary)
            is_ceiling = label == ceiling
            style = dict(color="black", lw=2.5) if is_ceiling else dict(lw=1.2)
            ax.plot(x, y, label=names[label], **style)
            if is_ceiling:
                ax.fill_between(x, y - se, y + se, color="black", alpha=0.12)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out pass@1 gain over the warm start")
        ax.grid(alpha=0.3)
    axes[1].set_xscale("log")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=8)
    fig.subplots_adjust(bottom=0.24)
    fig.suptitle("Long chain: every arm against the ceiling (VinePPO, black; band ± 1 s.e.; "
                 "mean over each arm's seeds)")  # fmt: skip
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def scatter(points: list[dict], out: Path, names: dict, ceiling: str, ylabel: str) -> Path | None:
    """Each arm's credit agreement against what it learned (``ylabel``: its share of the
    ceiling, or its gain over GRPO while the ceiling is unresolved), with 90 % intervals."""
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for p in points:
        lo = p["y"] - p["lo"] if math.isfinite(p["lo"]) else 0
        hi = p["hi"] - p["y"] if math.isfinite(p["hi"]) else 0
        color = "black" if p["label"] == ceiling else "C0"
        ax.errorbar(p["r"], p["y"], yerr=[[lo], [hi]], fmt="o", color=color, capsize=3)
        ax.annotate(names[p["label"]], (p["r"], p["y"]), fontsize=7, xytext=(4, 3),
                    textcoords="offset points")  # fmt: skip
    ax.axhline(0, color="grey", lw=0.8)
    if "share" in ylabel:  # the ceiling itself
        ax.axhline(1, color="black", lw=0.8, ls="--")
    ax.set_xlabel(f"credit agreement with A* (within-completion r, K = {points[0]['k']})")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
