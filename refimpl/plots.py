"""Figures of runs and comparisons: ``refimpl plot``, ``refimpl compare`` and ``make demo``.

Everything reads the run directories the trainer writes (``metrics.jsonl``, ``probes.jsonl``,
``config.json``), so a figure can be redrawn from any finished or interrupted run. The
helpers of the notebooks live in ``refimpl.notebook_figures``, which imports this module (never the
other way round).
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files, not windows: runs on headless machines and in tests

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refimpl.algorithms import NAMES  # noqa: E402
from refimpl.runs.runlog import (  # noqa: E402
    read_metrics,
    read_probes,
    read_run_config,
    write_bytes_atomic,
)

#: Line colours, one per position in ``refimpl.algorithms.NAMES`` (matplotlib's tab10 in the
#: order the algorithms got them, then tab20's light shades): a new algorithm gets the next one.
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#8c564b",
    "#7f7f7f",
    "#bcbd22",
    "#2ca02c",
    "#17becf",
    "#d62728",
    "#9467bd",
    "#e377c2",
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
)
#: One colour per algorithm, the same in every figure of the project.
ALGO_COLORS = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(NAMES)}


#: The records of ``run_dir/metrics.jsonl`` (one per step, plus step 0's evaluation): the one
#: reader, ``refimpl.runs.runlog.read_metrics``, under the name the notebooks use.
load_metrics = read_metrics


def load_probes(run_dir: Path | str) -> list[dict[str, Any]]:
    """The entropy snapshots of ``run_dir/probes.jsonl``."""
    return read_probes(run_dir)


def run_info(run_dir: Path | str, train_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Algorithm, task and seed of a run (from its ``config.json``, or from ``train_config``
    when the caller holds the run's settings)."""
    tc = train_config if train_config is not None else read_run_config(run_dir)["train_config"]
    algo_args = tc.get("algo_args") or []
    if not (isinstance(algo_args, list) and all(isinstance(a, str) for a in algo_args)):
        raise ValueError(
            f"{Path(run_dir) / 'config.json'}: train_config.algo_args is {json.dumps(algo_args)}, "
            "expected a list of strings (edited?)"
        )
    return {
        "algo": tc["algo"],
        "task": tc["task"],
        "seed": tc.get("seed", "?"),
        "algo_args": algo_args,
        "eval_samples": tc.get("eval_samples", 16),  # 16: TrainConfig's default
    }


def check_metric_values(run_dir: Path | str) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl``, after checking that every value is a number
    (or null), as the trainer writes them: ``ValueError`` naming the file, the record and the
    key otherwise (a figure would fail on it half drawn)."""
    records = read_metrics(run_dir)
    for n, record in enumerate(records, 1):
        for key, value in record.items():
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
            ):
                raise ValueError(
                    f"{Path(run_dir) / 'metrics.jsonl'}: record {n} has {key} "
                    f"{json.dumps(value)[:60]}, not a number (edited or damaged?)"
                )
    return records


def refuse_link(out: Path) -> None:
    """``ValueError`` when the figure ``out`` is a symbolic link: it would be written through."""
    if Path(out).is_symlink():
        raise ValueError(
            f"{out}: a symbolic link (to {os.readlink(out)}), which refimpl never writes "
            "through: remove it"
        )


def save_figure(fig, out: Path | str, **savefig_kwargs: Any) -> Path:
    """Write the figure ``fig`` to ``out`` (its format from the suffix) the way refimpl
    writes every file: whole or not at all, never through a symbolic link
    (``refimpl.runs.runlog.write_bytes_atomic``), the directory made if need be."""
    import io

    out = Path(out)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=out.suffix.lstrip(".") or "png", **savefig_kwargs)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, buffer.getvalue())
    return out


#: Metrics computed from logged ones: name -> the logged keys it sums.
DERIVED = {"clip_frac": ("clip_frac_low", "clip_frac_high")}


def _value(record: dict[str, Any], key: str) -> float | None:
    if key in DERIVED:
        parts = [record.get(k) for k in DERIVED[key]]
        return None if any(v is None for v in parts) else float(sum(parts))
    return record.get(key)


def series(records: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of the records that carry ``key`` (or the parts of a DERIVED key)."""
    pts = [(r["step"], v) for r in records if (v := _value(r, key)) is not None]
    if not pts:
        return np.array([]), np.array([])
    steps, values = zip(*pts)
    return np.asarray(steps, dtype=float), np.asarray(values, dtype=float)


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Trailing moving average (the first points average what exists so far)."""
    if window <= 1 or values.size == 0:
        return values
    c = np.cumsum(np.insert(values, 0, 0.0))
    out = np.empty_like(values)
    for i in range(values.size):
        lo = max(0, i + 1 - window)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


PANELS = (
    # success_rate_all: every sampled completion, before dynamic sampling keeps only the
    # informative groups (the kept groups' reward is biased towards 50 %).
    ("success_rate_all", "training success (all samples)", 10),
    ("heldout_greedy", "held-out success (greedy)", 1),
    ("heldout_pass@1", "held-out pass@1 (solid), pass@16 (dashed)", 1),
    ("pass@k vs k", "held-out pass@k: start (dashed), end (solid)", 0),
    ("entropy_mean", "mean token entropy (nats)", 10),
    ("clip_frac", "clip fraction (solid), TEPO mask fraction (dotted)", 10),
    ("cov_logp_adv", "Cov(log π_old, A) over response tokens", 10),
    ("cov vs entropy change", "entropy change vs Cov(log π_old, A), per step", 0),
)
#: Panels that are not a metric against step: drawn by their own function.
SPECIAL_PANELS = ("pass@k vs k", "cov vs entropy change")


def pass_at_k_points(
    records: Sequence[dict[str, Any]], which: int
) -> tuple[list[int], list[float]]:
    """``(ks, values)`` of the ``which``-th evaluation carrying pass@k (0: first, −1: last)."""
    evals = [r for r in records if any(k.startswith("heldout_pass@") for k in r)]
    if not evals:
        return [], []
    rec = evals[which]
    ks = sorted(int(k.split("@")[1]) for k in rec if k.startswith("heldout_pass@"))
    return ks, [rec[f"heldout_pass@{k}"] for k in ks]


def plot_pass_at_k_vs_k(ax, groups: dict[str, Sequence[Path]]) -> None:
    """pass@k against k (log2 axis): the warm start (first evaluation, dashed grey, mean over
    every run) and each algorithm at its last evaluation (solid, mean over seeds). RL that only
    sharpens the policy lifts the left end and lowers or keeps the right end."""
    starts = []
    for label, dirs in groups.items():
        ends = []
        for d in dirs:
            records = load_metrics(d)
            ks, first = pass_at_k_points(records, 0)
            _, last = pass_at_k_points(records, -1)
            if ks:
                starts.append((ks, first))
                ends.append((ks, last))
        if ends:
            ks = ends[0][0]
            ax.plot(
                ks,
                np.mean([v for _k, v in ends], axis=0),
                color=ALGO_COLORS.get(label.split()[0]),
                lw=1.8,
                marker="o",
                ms=3,
                label=label,
            )
    if starts:
        ks = starts[0][0]
        ax.plot(
            ks,
            np.mean([v for _k, v in starts], axis=0),
            color="0.4",
            ls="--",
            lw=1.2,
            marker="s",
            ms=3,
            label="warm start",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per problem)")
    ax.grid(alpha=0.3, which="both")


def entropy_change_points(
    records: Sequence[dict[str, Any]], key: str = "cov_logp_adv"
) -> tuple[np.ndarray, np.ndarray, float]:
    """``(cov, entropy_change, r)``: per training step, the covariance ``key`` and the measured
    change of mean entropy on that step's trained tokens, and their Pearson correlation over
    steps (NaN with fewer than 3 steps or no spread)."""
    pts = [
        (r[key], r["entropy_change"])
        for r in records
        if r.get(key) is not None and r.get("entropy_change") is not None
    ]
    if len(pts) < 3:
        return np.array([]), np.array([]), float("nan")
    x, y = (np.asarray(v, dtype=float) for v in zip(*pts))
    if x.std() == 0 or y.std() == 0:
        return x, y, float("nan")
    return x, y, float(np.corrcoef(x, y)[0, 1])


def plot_cov_vs_entropy_change(
    ax, groups: dict[str, Sequence[Path]], key: str = "cov_logp_adv"
) -> dict[str, float]:
    """Scatter of the entropy change against the covariance, one point per step, one colour per
    algorithm; returns each label's correlation over steps (seeds pooled)."""
    correlations = {}
    for label, dirs in groups.items():
        xs, ys = [], []
        for d in dirs:
            x, y, _ = entropy_change_points(load_metrics(d), key)
            xs.append(x)
            ys.append(y)
        x, y = np.concatenate(xs), np.concatenate(ys)
        if x.size < 3:
            continue
        r = float(np.corrcoef(x, y)[0, 1]) if x.std() > 0 and y.std() > 0 else float("nan")
        correlations[label] = r
        ax.scatter(
            x,
            y,
            s=5,
            alpha=0.35,
            color=ALGO_COLORS.get(label.split()[0]),
            label=f"{label}: r = {r:+.2f}",
        )
    ax.axhline(0, color="0.5", lw=0.8)
    ax.axvline(0, color="0.5", lw=0.8)
    ax.set_xlabel(
        key.replace("cov_logp_adv", "Cov(log π_old, A)").replace(
            "cov_logp_update", "Cov(log π_old, −∂L/∂log π)"
        )
    )
    ax.set_ylabel("entropy change on the batch (nats)")
    ax.grid(alpha=0.3)
    return correlations


def _draw_panel(ax, groups: dict[str, Sequence[Path]], key: str, title: str, window: int) -> None:
    """One panel of the run/compare figure (a metric against step, or a special panel)."""
    if key == "pass@k vs k":
        plot_pass_at_k_vs_k(ax, groups)
    elif key == "cov vs entropy change":
        if plot_cov_vs_entropy_change(ax, groups):
            ax.legend(fontsize=7, loc="best")
    else:
        plot_metric(ax, groups, key, window, title=title)
        if key == "heldout_pass@1":
            plot_metric(ax, groups, "heldout_pass@16", window, title=title, ls="--")
        if key == "clip_frac":
            plot_metric(ax, groups, "kl_mask_frac", window, title=title, ls=":", band=False)
    ax.set_title(title, fontsize=10)


def plot_run(
    run_dir: Path | str, out: Path | str | None = None, train_config: dict[str, Any] | None = None
) -> Path:
    """The panels of ``PANELS`` for one run → ``curves.png`` (``train_config``: the run's
    settings, when the caller holds them; else read from its config.json)."""
    run_dir = Path(run_dir)
    info = run_info(run_dir, train_config)
    groups = {info["algo"]: [run_dir]}
    fig, axes = plt.subplots(2, len(PANELS) // 2, figsize=(4 * len(PANELS) // 2, 6.6))
    for ax, (key, title, window) in zip(axes.flat, PANELS):
        _draw_panel(ax, groups, key, title, window)
    fig.suptitle(f"{info['algo']} on {info['task']} (seed {info['seed']})", fontsize=11)
    fig.tight_layout()
    out = Path(out) if out else run_dir / "curves.png"
    refuse_link(out)
    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


def group_runs(run_dirs: Iterable[Path | str]) -> dict[str, list[Path]]:
    """Run directories grouped by a label: the algorithm, plus its overrides if any."""
    groups: dict[str, list[Path]] = defaultdict(list)
    for d in run_dirs:
        info = run_info(d)
        label = info["algo"] + (" " + " ".join(info["algo_args"]) if info["algo_args"] else "")
        groups[label].append(Path(d))
    return dict(groups)


def mean_curve(
    run_dirs: Sequence[Path], key: str, window: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over runs of a (smoothed) metric, on the steps all runs share."""
    curves = []
    for d in run_dirs:
        steps, values = series(load_metrics(d), key)
        curves.append(dict(zip(steps, smooth(values, window))))
    common = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    stack = np.array([[c[s] for s in common] for c in curves]) if common else np.zeros((0, 0))
    if stack.size == 0:
        return np.array([]), np.array([]), np.array([]), np.array([])
    return np.asarray(common), stack.mean(0), stack.min(0), stack.max(0)


def plot_compare(
    run_dirs: Sequence[Path | str], out: Path | str, panels: Sequence[tuple[str, str, int]] = PANELS
) -> Path:
    """Every algorithm's curves in one figure: mean over seeds, band = min..max over seeds."""
    groups = group_runs(run_dirs)
    rows = 2 if len(panels) > 4 else 1
    cols = -(-len(panels) // rows)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax, (key, title, window) in zip(axes.flat, panels):
        _draw_panel(ax, groups, key, title, window)
        if key.startswith("heldout"):  # the warm start's level, shared by every run
            base = [series(load_metrics(d), key)[1][:1] for d in map(Path, run_dirs)]
            base = [b[0] for b in base if b.size]
            if base:
                ax.axhline(float(np.mean(base)), color="0.4", ls="--", lw=0.9, label="warm start")
        if key == "cov vs entropy change":
            # The prediction that works beside the one that does not: the measured change
            # against the first-order prediction ⟨∇H̄, Δθ⟩ (docs/entropy_mechanism.md), with
            # the covariance's correlation in the legend next to the prediction's.
            from refimpl.diagnostics.entropy_attribution import logged_pairs, pearson

            runs = {label: [load_metrics(d) for d in dirs] for label, dirs in groups.items()}
            if any(
                logged_pairs(r, "entropy_change_pred", "entropy_change")[0].size
                for rs in runs.values()
                for r in rs
            ):
                ax.clear()
                lo, hi = np.inf, -np.inf
                for label, records in runs.items():
                    pts = [
                        logged_pairs(r, "entropy_change_pred", "entropy_change") for r in records
                    ]
                    x = np.concatenate([p[0] for p in pts])
                    y = np.concatenate([p[1] for p in pts])
                    if x.size < 3:
                        continue
                    cov = [logged_pairs(r, "cov_logp_adv", "entropy_change") for r in records]
                    r_cov = pearson(
                        np.concatenate([c[0] for c in cov]), np.concatenate([c[1] for c in cov])
                    )
                    ax.scatter(
                        x,
                        y,
                        s=5,
                        alpha=0.35,
                        color=ALGO_COLORS.get(label.split()[0]),
                        label=f"{label}: r = {pearson(x, y):+.2f} (Cov: {r_cov:+.2f})",
                    )
                    lo, hi = min(lo, x.min(), y.min()), max(hi, x.max(), y.max())
                if np.isfinite(lo):
                    ax.plot([lo, hi], [lo, hi], color="0.4", lw=0.8, ls="--")
                ax.axhline(0, color="0.5", lw=0.8)
                ax.axvline(0, color="0.5", lw=0.8)
                ax.set_xlabel("predicted: ⟨∇H̄(θ_old), Δθ⟩ (nats)")
                ax.set_ylabel("measured entropy change (nats)")
                ax.set_title(
                    "entropy change per step vs its first-order prediction\n"
                    "(legend: r; in brackets r with Cov(log π_old, A))",
                    fontsize=9,
                )
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7, loc="best")
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    first = axes.flat[0]
    first.legend(handles=[h for h in first.lines if not h.get_label().startswith("_")], fontsize=8)
    fig.tight_layout()
    out = Path(out)
    refuse_link(out)
    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


def end_values(values: np.ndarray, n: int = 3) -> np.ndarray:
    """A run's end: its last ``n`` evaluations after the first (the warm start's). A short run
    (dynamic sampling spends a token budget in fewer steps) has fewer; the start's evaluation
    is never one of them, unless it is the only one."""
    return values[max(1, values.size - n) :] if values.size > 1 else values


def summary_table(run_dirs: Sequence[Path | str], target: float) -> list[dict[str, Any]]:
    """Per algorithm (mean over seeds): held-out greedy success at step 0 and at the end (mean
    of the last three evaluations) and their difference, the first step at which it reached
    ``target`` (per seed; None when not reached), pass@1 and pass@16 at the start and the end
    (last three evaluations), the mean token entropy over the first and the last 10 steps,
    and the mean clip fraction (low + high) and TEPO mask fraction over all steps; and the
    ``eval_samples`` (per problem, for pass@k) its runs drew."""

    def mean_of(records: list[dict[str, Any]], key: str, part: slice | None) -> float:
        _, values = series(records, key)
        values = end_values(values) if part is None else values[part]
        return float(values.mean()) if values.size else float("nan")

    rows = []
    for label, dirs in group_runs(run_dirs).items():
        per_seed = []
        reached = []
        for d in dirs:
            records = load_metrics(d)
            steps, success = series(records, "heldout_greedy")
            hit = steps[success >= target]
            reached.append(int(hit[0]) if hit.size else None)
            first, last = slice(0, 1), None  # None: end_values (one evaluation's SE is ~0.03)
            per_seed.append(
                {
                    "start": mean_of(records, "heldout_greedy", first),
                    "final": mean_of(records, "heldout_greedy", last),
                    "pass1_start": mean_of(records, "heldout_pass@1", first),
                    "pass1_end": mean_of(records, "heldout_pass@1", last),
                    "pass16_start": mean_of(records, "heldout_pass@16", first),
                    "pass16_end": mean_of(records, "heldout_pass@16", last),
                    "entropy_start": mean_of(records, "entropy_mean", slice(0, 10)),
                    "entropy_end": mean_of(records, "entropy_mean", slice(-10, None)),
                    "clip_frac": mean_of(records, "clip_frac", slice(None)),
                    "mask_frac": mean_of(records, "kl_mask_frac", slice(None)),
                }
            )
        row = {"algo": label, "seeds": len(dirs), "steps_to_target": reached}
        row["eval_samples"] = sorted({run_info(d)["eval_samples"] for d in dirs})
        for key in per_seed[0]:
            row[key] = float(np.mean([p[key] for p in per_seed]))
        row["gain"] = row["final"] - row["start"]
        rows.append(row)
    return rows


def format_table(rows: Sequence[dict[str, Any]], target: float) -> str:
    """A plain-text table of :func:`summary_table`."""
    head = (
        f"{'algorithm':<22}{'seeds':>6}{'greedy start':>13}{'end':>7}{'gain':>8}"
        f"{'pass@1':>15}{'pass@16':>15}{'entropy':>15}{'clip':>8}{'mask':>8}"
        f"{f'steps to {target:.2f}':>16}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        reached = ",".join("-" if s is None else str(s) for s in r["steps_to_target"])
        mask = "-" if math.isnan(r["mask_frac"]) else f"{r['mask_frac']:.3f}"
        lines.append(
            f"{r['algo']:<22}{r['seeds']:>6}{r['start']:>13.3f}{r['final']:>7.3f}"
            f"{r['gain']:>+8.3f}"
            f"{r['pass1_start']:>7.3f}→{r['pass1_end']:<7.3f}"
            f"{r['pass16_start']:>7.3f}→{r['pass16_end']:<7.3f}"
            f"{r['entropy_start']:>7.3f}→{r['entropy_end']:<7.3f}"
            f"{r['clip_frac']:>8.4f}{mask:>8}{reached:>16}"
        )
    # pass@k: from as many samples per problem as the runs drew (--eval-samples).
    samples = sorted({n for r in rows for n in r.get("eval_samples", [16])}) or [16]
    fewest = min(samples)
    lines.append(
        "greedy: held-out greedy success (end = mean of the last 3 evaluations); pass@k: "
        f"unbiased, from {' or '.join(map(str, samples))} samples per problem"
        f"{' (pass@16 needs 16: nan)' if fewest < 16 else ''}; entropy: mean over the first → "
        "last 10 steps; clip: mean clip fraction (low + high); mask: TEPO's KL-mask fraction; "
        f"steps to {target:.2f}: the first evaluation at which held-out greedy success reached "
        f"{target:.2f}, per seed ('-': not within the run's steps)"
    )
    return "\n".join(lines)


def plot_metric(
    ax,
    groups: dict[str, Sequence[Path]],
    key: str,
    window: int = 1,
    title: str | None = None,
    band: bool = True,
    **line_kwargs,
) -> None:
    """One metric vs step for every algorithm of ``groups``: the mean over seeds, and a band
    from the lowest to the highest seed (when there are several). Missing metrics are skipped."""
    for label, dirs in groups.items():
        steps, mean, lo, hi = mean_curve(list(dirs), key, window)
        if steps.size == 0:
            continue
        color = ALGO_COLORS.get(label.split()[0])
        ax.plot(
            steps,
            mean,
            color=color,
            lw=1.8,
            label=f"{label} (n={len(dirs)})",
            **({"marker": "o", "ms": 3} if window == 1 else {}),
            **line_kwargs,
        )
        if band and len(dirs) > 1:
            ax.fill_between(steps, lo, hi, color=color, alpha=0.15, lw=0)
    ax.set_title(title or key, fontsize=10)
    ax.set_xlabel("RL step")
    ax.grid(alpha=0.3)
