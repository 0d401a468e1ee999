"""``docs/figures/claims_real_curves.png``: the real model's held-out success against
optimizer steps, one panel per seed evaluated at several steps, one line per arm.
"""

from __future__ import annotations

from pathlib import Path

from arms import NAMES, REAL_ARMS
from claims_results import ROOT
from real_runs import REAL_THRESHOLD_GAIN, final

FIGURE = ROOT / "docs" / "figures" / "claims_real_curves.png"

COLORS = {"dapo": "C0", "dapo_noshape": "C9", "gtpo": "C1", "grpo_s": "C2", "tepo": "C3",
          "grpo": "C7", "gtpo_alpha0": "C1", "gtpo_batch": "C5", "tepo_nomask": "C3"}  # fmt: skip

DASHED = ("dapo_noshape", "gtpo_alpha0", "gtpo_batch", "tepo_nomask")


def plot_real_curves(real: dict, path: Path = FIGURE) -> Path | None:
    """Held-out success against optimizer steps, one panel per seed with evaluations at
    several steps, one line per arm."""
    seeds = [s for s in sorted({s for _, s in real}) if ("base", s) in real
             and any(len(r["evals"]) > 1 for (_, t), r in real.items() if t == s)]  # fmt: skip
    if not seeds:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(seeds), figsize=(4.2 * len(seeds), 3.4), sharey=True,
                             squeeze=False)  # fmt: skip
    for ax, s in zip(axes[0], seeds):
        base = final(real[("base", s)])
        for arm in REAL_ARMS[1:]:
            if (arm, s) not in real:
                continue
            evs = real[(arm, s)]["evals"]
            x = [0] + [e["step"] for e in evs]
            y = [base["success"]] + [e["success"] for e in evs]
            err = [base["success_se"]] + [e["success_se"] for e in evs]
            style = "--" if arm in DASHED else "-"
            ax.errorbar(x, y, yerr=err, fmt=style + "o", ms=3, capsize=2, color=COLORS[arm],
                        label=NAMES.get(arm, arm))  # fmt: skip
        ax.axhline(base["success"] + REAL_THRESHOLD_GAIN, color="grey", lw=0.8, ls=":")
        ax.set_title(f"seed {s}")
        ax.set_xlabel("optimizer step")
    axes[0][0].set_ylabel("held-out success (± s.e.)")
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center",
               ncol=min(4, len(handles)), frameon=False)  # fmt: skip
    fig.suptitle("SmolLM2-135M through TRL: held-out success; dotted: base + 0.10", fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    from refimpl.plots import save_figure

    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
