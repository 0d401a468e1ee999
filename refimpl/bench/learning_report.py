"""The learning benchmark's report: the tables of each task, its figures, and ``report.md``.

The report holds the measurements (``refimpl.bench.learning_summary``): per task the outcome
and the mechanism tables, the entropy change predicted and attributed, the curves against
sampled tokens. It judges no paper's claim: ``scripts/experiments/learning/verdicts.py``
reads the run's ``results.json`` and adds the verdicts to the report.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from refimpl.bench import format_machine, markdown_table
from refimpl.diagnostics.entropy_attribution import ENTROPY_TERM, MOMENTUM, TOKEN_CLASSES
from refimpl.runs.runlog import read_metrics

if TYPE_CHECKING:
    from refimpl.bench.learning_settings import LearningConfig, Run

ABLATION_COLORS = ("#9467bd", "#e377c2", "#000000", "#ff9896", "#8c564b", "#c49c94")


def _fmt_q(q: dict[str, float], scale: float = 1.0, unit: str = "") -> str:
    def f(v: float) -> str:
        return "n.r." if not math.isfinite(v) else f"{v / scale:.0f}{unit}"

    return f"{f(q['median'])} [{f(q['q25'])}–{f(q['q75'])}] ({q['reached']} reached)"


#: Columns of the report's two tables per task: the outcome, then the mechanisms behind it.
RESULT_COLUMNS = [
    "algorithm",
    "seeds",
    "final greedy (mean ± sd)",
    "gain (worst seed)",
    "pass@1 start → end",
    "pass@16 start → end",
    "entropy start → end",
    "collapsed",
    "tokens to target, median [IQR]",
    "AUC",
]
MECHANISM_COLUMNS = [
    "algorithm",
    "clip fraction",
    "TEPO mask fraction",
    "mean Cov(logp, A)",
    "r(Cov, entropy change) over steps",
    "steps run",
    "kept groups",
    "seconds per run",
]


#: The report's last paragraph: the benchmark measures, and says where the claims are read.
READINGS = (
    "The papers' claims are not judged here: `python scripts/experiments/learning/verdicts.py "
    '<this directory>` reads results.json and adds them below, under "Verdicts".'
)


def _report_header(cfg: LearningConfig, info: dict[str, Any], wall_s: float) -> list[str]:
    """The report's first lines: the machine and wall time, then the settings of every run."""
    train = cfg.train_defaults()
    how = (
        "summed logged step and evaluation times over the parallel runs"
        if cfg.report_only
        else "measured"
    )
    return [
        f"Machine: {format_machine(info)}. Wall time of the training: {wall_s / 60:.1f} "
        f"min ({how}; {cfg.workers or min(4, os.cpu_count() or 1)} parallel runs, one "
        f"torch thread each).",
        "",
        f"Settings: preset {cfg.preset!r}: lr {train.lr}, {train.prompts_per_step} prompts × "
        f"G = {train.group_size}, {train.minibatches} minibatch(es) × {train.ppo_epochs} "
        f"epoch(s) per rollout, task knobs {list(train.task_args) or 'default'}, "
        f"seeds {cfg.seeds}, budget {cfg.budget_steps} reference-length batches of sampled "
        f"tokens per run, held-out greedy success on {cfg.eval_problems} problems every "
        f"{cfg.eval_every} steps, target = base + {cfg.target_gain}, entropy collapse = end"
        f" < {cfg.collapse_ratio} × start.",
        "",
    ]


def result_row(label: str, s: dict[str, Any]) -> list[object]:
    """One algorithm's row of the outcome table (``s``: its summary over seeds)."""

    def arrow(key: str) -> str:
        return f"{s[key + '_start']['mean']:.3f} → {s[key + '_end']['mean']:.3f}"

    return [
        label,
        s["seeds"],
        f"{s['final']['mean']:.3f} ± {s['final']['std']:.3f}",
        f"{s['gain']['mean']:+.3f} ({s['gain']['min']:+.3f})",
        arrow("pass1"),
        arrow("pass16"),
        arrow("entropy"),
        f"{s['collapsed']}/{s['seeds']}",
        _fmt_q(s["tokens_to_target"], 1e3, "k"),
        f"{s['auc']['mean']:.3f}",
    ]


def mechanism_row(label: str, s: dict[str, Any]) -> list[object]:
    """One algorithm's row of the mechanism table (``s``: its summary over seeds)."""
    return [
        label,
        f"{s['clip_frac']['mean']:.4f}",
        "-" if math.isnan(s["mask_frac"]["mean"]) else f"{s['mask_frac']['mean']:.4f}",
        f"{s['cov_mean']['mean']:+.4f}",
        f"{s['cov_entropy_r']['mean']:+.2f}",
        f"{s['steps']['median']:.0f}",
        f"{s['kept_group_frac']['mean']:.2f}",
        f"{s['time_s']['mean']:.0f}",
    ]


def _task_section(task: str, res: dict[str, Any], figures: list[Path]) -> list[str]:
    """One task's section: its budget and target, the two tables, then its figures."""
    summary = res["summary"].items()
    lines = [
        f"### {task}",
        "",
        f"Budget {res['budget_tokens']:,} sampled tokens per run; warm start "
        f"(held-out greedy) {res['base']:.3f}; target {res['target']:.3f}.",
        "",
        markdown_table(RESULT_COLUMNS, [result_row(label, s) for label, s in summary]),
        "",
        markdown_table(MECHANISM_COLUMNS, [mechanism_row(label, s) for label, s in summary]),
        "",
    ]
    if "entropy" in res:
        lines += _entropy_tables(res)
    for fig in figures:
        lines += [f"![{fig.stem}](figures/{fig.name})", ""]
    return lines


def format_report(
    cfg: LearningConfig,
    results: dict[str, Any],
    info: dict[str, Any],
    wall_s: float,
    figures: dict[str, list[Path]],
) -> str:
    """The markdown report: header, one section per task (the measurements), then where the
    papers' claims are read off them (the benchmark judges none)."""
    lines = _report_header(cfg, info, wall_s)
    for task, res in results.items():
        lines += _task_section(task, res, figures.get(task, []))
    lines += [READINGS, ""]
    return "\n".join(lines)


def _entropy_tables(res: dict[str, Any]) -> list[str]:
    """The report's tables of ``refimpl.diagnostics.entropy_attribution``: how the first-order prediction
    and the covariances track the measured entropy change, and the attribution by class."""
    pred, attr = res["entropy"]["prediction"], res["entropy"]["attribution"]

    def f(v: float, fmt: str = "+.2f") -> str:
        return "-" if not math.isfinite(v) else format(v, fmt)

    lines = [
        "Why entropy moves (docs/entropy_mechanism.md), seeds pooled: Pearson's r over steps "
        "with the measured `entropy_change`, raw / after each run's 11-step running mean "
        "(detr.) / of first differences (diff.); slope of measured on predicted; the path "
        "prediction on the attribution steps, next to the plain one on the same steps.",
        "",
        markdown_table(
            [
                "algorithm",
                "steps",
                "r(pred)",
                "slope",
                "r(pred) detr.",
                "attributed steps",
                "r(path) vs r(pred) there",
                "r(Cov) raw / detr. / diff.",
                "r(Cov update) raw / detr.",
                "r(Cov, pred) raw / detr.",
            ],
            [
                [
                    r["algo"],
                    r["steps"],
                    f(r["r_pred"]),
                    f(r["slope_pred"]),
                    f(r["r_pred_detr"]),
                    r["attr_steps"],
                    f"{f(r['r_path'])} vs {f(r['r_pred_attr'])}",
                    f"{f(r['r_cov'])} / {f(r['r_cov_detr'])} / {f(r['r_cov_diff'])}",
                    f"{f(r['r_covu'])} / {f(r['r_covu_detr'])}",
                    f"{f(r['r_cov_pred'])} / {f(r['r_cov_pred_detr'])}",
                ]
                for r in pred
            ],
        ),
        "",
    ]
    classes = [c for c in (*TOKEN_CLASSES, ENTROPY_TERM, MOMENTUM) if any(c in r for r in attr)]
    lines += [
        "Attribution of the predicted entropy change, mean per attributed step, 10⁻³ nats "
        "(A: the algorithm's advantage; high/low: π_old of the sampled token above / at or "
        "below the batch median; momentum: earlier steps' gradients in Adam's m).",
        "",
        markdown_table(
            ["algorithm", "attributed steps", *classes, "sum", "predicted", "measured", "max gap"],
            [
                [
                    r["algo"],
                    r["attr_steps"],
                    *(f(1e3 * r.get(c, math.nan), "+.3f") for c in classes),
                    f(1e3 * r["sum"], "+.3f"),
                    f(1e3 * r["entropy_change_pred"], "+.3f"),
                    f(1e3 * r["entropy_change"], "+.3f"),
                    f(r["max_gap"], ".1e"),
                ]
                for r in attr
            ],
        ),
        "",
    ]
    return lines


# ---------------------------------------------------------------------------------------------
# Figures.
# ---------------------------------------------------------------------------------------------


def _curve_on_grid(run_dir: Path, key: str, grid: np.ndarray, window: int) -> np.ndarray:
    from refimpl.plots import smooth

    recs = [r for r in read_metrics(run_dir) if key in r]
    if not recs:
        return np.full(grid.shape, np.nan)
    x = np.array([r.get("sampled_tokens", 0) for r in recs], dtype=float)
    y = smooth(np.array([r[key] for r in recs], dtype=float), window)
    if key == "heldout_greedy" and window > 1:
        y = np.array([y[max(0, i - window + 1) : i + 1].mean() for i in range(y.size)])
    return np.interp(grid, x, y, left=np.nan, right=np.nan)


def plot_task(
    cfg: LearningConfig,
    runs: list[Run],
    task: str,
    budget: int,
    labels: list[str],
    out: Path,
    title: str,
) -> Path:
    # A bare Figure, not pyplot: drawing a report file must not switch the backend of a
    # notebook that called this (its inline figures would stop showing).
    from matplotlib.figure import Figure

    from refimpl.plots import ALGO_COLORS, save_figure

    grid = np.linspace(0, budget, 101)
    panels = (
        ("heldout_greedy", "held-out success (greedy, 3-eval mean)", 3),
        ("heldout_pass@16", "held-out pass@16", 1),
        ("entropy_mean", "mean token entropy (nats)", 10),
        ("success_rate_all", "training success (all sampled groups)", 10),
    )
    fig = Figure(figsize=(4.4 * len(panels), 3.6))
    axes = fig.subplots(1, len(panels))
    styles = ["-", "--", ":", "-."]
    for i, label in enumerate(labels):
        dirs = [r.train.run_dir for r in runs if r.task == task and r.label == label]
        if not dirs:
            continue
        algo = label.split()[0]
        variant = " " in label  # an ablation: its own colour, dashed
        color = ABLATION_COLORS[i % len(ABLATION_COLORS)] if variant else ALGO_COLORS.get(algo)
        ls = styles[1 + i % 3] if variant else "-"
        for ax, (key, _t, window) in zip(axes, panels):
            curves = np.array([_curve_on_grid(d, key, grid, window) for d in dirs])
            if np.isnan(curves).all():
                continue
            with warnings.catch_warnings():  # grid points past a run's end are NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(curves, axis=0)
                lo, hi = np.nanmin(curves, 0), np.nanmax(curves, 0)
            ax.plot(grid / 1e3, mean, color=color, ls=ls, lw=1.6, label=f"{label} (n={len(dirs)})")
            if len(dirs) > 1:
                ax.fill_between(grid / 1e3, lo, hi, color=ax.lines[-1].get_color(), alpha=0.10)
    for ax, (_k, t, _w) in zip(axes, panels):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("sampled tokens (thousands)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return save_figure(fig, out, dpi=100)


def task_figures(
    cfg: LearningConfig, runs: list[Run], budgets: dict[str, int], results: dict[str, Any]
) -> dict[str, list[Path]]:
    """Per task, its figures: every algorithm's curves, and the ablations beside the runs of
    the algorithms they ablate."""
    figures: dict[str, list[Path]] = {}
    main_labels = cfg.algo_list()
    out = cfg.out_dir() / "figures"
    for task in results:
        figures[task] = [
            plot_task(
                cfg, runs, task, budgets[task], main_labels, out / f"bench_learning_{task}.png",
                f"{task}: every algorithm, same sampled-token budget",
            )
        ]  # fmt: skip
        abl = [lab for lab in results[task]["summary"] if " " in lab]
        if abl:
            # Each ablated algorithm's own run beside its variants.
            ablated = dict.fromkeys(lab.split()[0] for lab in abl)
            labels = [a for a in ablated if a in main_labels] + abl
            figures[task].append(
                plot_task(
                    cfg, runs, task, budgets[task], labels, out / f"bench_ablation_{task}.png",
                    f"{task}: ablations",
                )
            )  # fmt: skip
    return figures
