"""Figures of runs and comparisons, shared by the CLI, ``make demo`` and the notebooks.

Everything reads the run directories the trainer writes (``metrics.jsonl``, ``probes.jsonl``,
``config.json``), so a figure can be redrawn from any finished or interrupted run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files, not windows: runs on headless machines and in tests

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from refimpl.runlog import read_metrics, read_probes, read_run_config  # noqa: E402

#: One colour per algorithm, the same in every figure of the project.
ALGO_COLORS = {
    "grpo": "#1f77b4",
    "dapo": "#ff7f0e",
    "dr_grpo": "#8c564b",
    "gspo": "#7f7f7f",
    "gpg": "#bcbd22",
    "gtpo": "#2ca02c",
    "grpo_s": "#17becf",
    "tepo": "#d62728",
    "clip_cov": "#9467bd",
    "kl_cov": "#e377c2",
    "forking_tokens": "#98df8a",
    "entropy_bonus": "#393b79",
}


def load_metrics(run_dir: Path | str) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl`` (one per step, plus step 0's evaluation)."""
    return read_metrics(run_dir)


def load_probes(run_dir: Path | str) -> list[dict[str, Any]]:
    """The entropy snapshots of ``run_dir/probes.jsonl``."""
    return read_probes(run_dir)


def run_info(run_dir: Path | str) -> dict[str, Any]:
    """Algorithm, task and seed of a run (from its ``config.json``)."""
    tc = read_run_config(run_dir)["train_config"]
    return {
        "algo": tc["algo"],
        "task": tc["task"],
        "seed": tc["seed"],
        "algo_args": tc.get("algo_args", []),
    }


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


def plot_run(run_dir: Path | str, out: Path | str | None = None) -> Path:
    """The panels of ``PANELS`` for one run → ``curves.png``."""
    run_dir = Path(run_dir)
    info = run_info(run_dir)
    groups = {info["algo"]: [run_dir]}
    fig, axes = plt.subplots(2, len(PANELS) // 2, figsize=(4 * len(PANELS) // 2, 6.6))
    for ax, (key, title, window) in zip(axes.flat, PANELS):
        _draw_panel(ax, groups, key, title, window)
    fig.suptitle(f"{info['algo']} on {info['task']} (seed {info['seed']})", fontsize=11)
    fig.tight_layout()
    out = Path(out) if out else run_dir / "curves.png"
    fig.savefig(out, dpi=110)
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
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    first = axes.flat[0]
    first.legend(handles=[h for h in first.lines if not h.get_label().startswith("_")], fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def entropy_heatmap(ax, run_dir: Path | str, probe_index: int = 0, max_len: int | None = None):
    """Per-token entropy along the probe completion (x: position, y: training step)."""
    snaps = load_probes(run_dir)
    if not snaps:
        raise ValueError(f"run_dir: {run_dir} has no probes.jsonl snapshots")
    rows = [s["probes"][probe_index]["entropy"] for s in snaps]
    width = max_len or max(len(r) for r in rows)
    grid = np.full((len(rows), width), np.nan)
    for i, r in enumerate(rows):
        grid[i, : min(len(r), width)] = r[:width]
    im = ax.imshow(
        grid,
        aspect="auto",
        origin="lower",
        cmap="magma",
        extent=(-0.5, width - 0.5, snaps[0]["step"], snaps[-1]["step"]),
    )
    ax.set_xlabel("token position in the completion")
    ax.set_ylabel("RL step")
    return im


def summary_table(run_dirs: Sequence[Path | str], target: float) -> list[dict[str, Any]]:
    """Per algorithm (mean over seeds): held-out greedy success at step 0 and at the end (mean
    of the last three evaluations) and their difference, the first step at which it reached
    ``target`` (per seed; None when not reached), pass@1 and pass@16 at the start and the end
    (last three evaluations), the mean token entropy over the first and the last 10 steps,
    and the mean clip fraction (low + high) and TEPO mask fraction over all steps."""

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
    lines.append(
        "greedy: held-out greedy success (end = mean of the last 3 evaluations); pass@k: "
        "unbiased, from 16 samples per problem; entropy: mean over the first → last 10 steps; "
        "clip: mean clip fraction (low + high); mask: TEPO's KL-mask fraction"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Helpers of the notebooks (notebooks/0*.ipynb): they draw on axes the caller owns and return
# numbers the notebooks print, so that every claim in a text cell is read off a printed value.
# ---------------------------------------------------------------------------------------------


def find_runs(root: Path | str) -> dict[str, list[Path]]:
    """The run directories under ``root`` (those with a ``metrics.jsonl``), grouped by
    algorithm label as :func:`group_runs` does, in ``refimpl.algorithms.NAMES`` order."""
    from refimpl.algorithms import NAMES

    dirs = sorted(p.parent for p in Path(root).glob("*/metrics.jsonl"))
    groups = group_runs(dirs)
    order = {name: i for i, name in enumerate(NAMES)}
    return dict(sorted(groups.items(), key=lambda kv: (order.get(kv[0].split()[0], 99), kv[0])))


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


def plot_entropy_percentiles(
    ax, dirs: Sequence[Path], color: str | None = None, window: int = 5, title: str | None = None
) -> None:
    """The 10th, 50th and 90th percentile of the rollout token entropy vs step (mean over
    ``dirs``): a band from p10 to p90 and the median as a line (log scale: the low tail is
    where collapse shows)."""
    out = {}
    for key in ("entropy_p10", "entropy_p50", "entropy_p90", "entropy_mean"):
        out[key] = mean_curve(list(dirs), key, window)[:2]
    steps, p10 = out["entropy_p10"]
    if steps.size == 0:
        ax.set_title((title or "") + " (no data)", fontsize=10)
        return
    ax.fill_between(
        steps,
        np.maximum(p10, 1e-6),
        out["entropy_p90"][1],
        color=color,
        alpha=0.2,
        lw=0,
        label="p10 … p90",
    )
    ax.plot(steps, out["entropy_p50"][1], color=color, lw=1.8, label="median")
    ax.plot(*out["entropy_mean"], color=color, lw=1.0, ls="--", label="mean")
    ax.set_yscale("log")
    ax.set_title(title or "", fontsize=10)
    ax.set_xlabel("RL step")
    ax.grid(alpha=0.3, which="both")


def plot_success_vs_entropy(
    ax, groups: dict[str, Sequence[Path]], success_key: str = "heldout_greedy", window: int = 10
) -> None:
    """Held-out success against the mean token entropy (trailing ``window`` steps), one
    trajectory per algorithm (mean over seeds) through the evaluation steps; a circle marks
    the start, a triangle the end."""
    for label, dirs in groups.items():
        xs, ys = [], []
        for d in dirs:
            records = load_metrics(d)
            e_steps, ent = series(records, "entropy_mean")
            s_steps, succ = series(records, success_key)
            if e_steps.size == 0 or s_steps.size == 0:
                continue
            ent_s = smooth(ent, window)
            # entropy at each evaluation step: the last training step at or before it
            idx = np.clip(np.searchsorted(e_steps, s_steps, side="right") - 1, 0, None)
            xs.append(dict(zip(s_steps, ent_s[idx])))
            ys.append(dict(zip(s_steps, succ)))
        if not xs:
            continue
        common = sorted(set.intersection(*(set(x) for x in xs)))
        x = np.array([[xi[s] for s in common] for xi in xs]).mean(0)
        y = np.array([[yi[s] for s in common] for yi in ys]).mean(0)
        color = ALGO_COLORS.get(label.split()[0])
        ax.plot(x, y, color=color, lw=1.5, marker=".", label=label)
        ax.plot(x[:1], y[:1], color=color, marker="o", ms=7, mfc="white")
        ax.plot(x[-1:], y[-1:], color=color, marker="^", ms=8)
    ax.set_xlabel(f"mean token entropy (nats, trailing {window} steps)")
    ax.set_ylabel(f"held-out success ({success_key.removeprefix('heldout_')})")
    ax.grid(alpha=0.3)


def probe_entropy_grid(
    run_dirs: Sequence[Path | str], max_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, grid)``: the per-token entropy of the probe completions, averaged over the
    probe prompts (and over ``run_dirs``, e.g. seeds) at each position; ``grid`` is
    ``[snapshots, positions]`` with NaN where no probe completion reaches the position."""
    per_run = []
    for d in run_dirs:
        snaps = load_probes(d)
        per_run.append({s["step"]: s["probes"] for s in snaps})
    if not per_run or not all(per_run):
        raise ValueError(f"run_dirs: no probes.jsonl snapshots in {list(run_dirs)}")
    steps = sorted(set.intersection(*(set(r) for r in per_run)))
    width = max_len or max(len(p["entropy"]) for r in per_run for s in steps for p in r[s])
    grid = np.full((len(steps), width), np.nan)
    for i, step in enumerate(steps):
        total, count = np.zeros(width), np.zeros(width)
        for r in per_run:
            for p in r[step]:
                h = np.asarray(p["entropy"][:width], dtype=float)
                total[: h.size] += h
                count[: h.size] += 1
        grid[i] = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return np.asarray(steps), grid


def plot_probe_heatmap(
    ax,
    run_dirs: Sequence[Path | str],
    max_len: int | None = None,
    vmin: float = 1e-3,
    vmax: float = 2.0,
    title: str | None = None,
):
    """Token entropy of the probe completions (x: position, y: RL step), averaged over the
    probe prompts and ``run_dirs``, on a log colour scale; returns the image for a colorbar."""
    from matplotlib.colors import LogNorm

    steps, grid = probe_entropy_grid(run_dirs, max_len)
    im = ax.imshow(
        np.clip(grid, vmin, vmax),
        aspect="auto",
        origin="lower",
        cmap="magma",
        norm=LogNorm(vmin=vmin, vmax=vmax),
        interpolation="nearest",
        extent=(-0.5, grid.shape[1] - 0.5, -0.5, len(steps) - 0.5),
    )
    ticks = np.linspace(0, len(steps) - 1, min(len(steps), 5)).round().astype(int)
    ax.set_yticks(ticks, [str(int(steps[t])) for t in ticks])
    ax.set_xlabel("token position")
    ax.set_ylabel("RL step")
    if title:
        ax.set_title(title, fontsize=10)
    return im


def probe_entropies(run_dir: Path | str, snapshot: int = -1) -> np.ndarray:
    """Every per-token entropy of one probe snapshot (``0``: the first, ``-1``: the last)."""
    snaps = load_probes(run_dir)
    if not snaps:
        raise ValueError(f"run_dir: {run_dir} has no probes.jsonl snapshots")
    return np.concatenate(
        [np.asarray(p["entropy"], dtype=float) for p in snaps[snapshot]["probes"]]
    )


def plot_entropy_distribution(
    ax, groups: dict[str, Sequence[Path]], floor: float = 1e-4, bins: int = 30
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Histogram (log-spaced bins) of the per-token entropy of the probe completions at the
    first snapshot (the base model, pooled over all runs, grey) and at the last snapshot of
    each algorithm (pooled over seeds). Returns ``{label: (start, end)}`` entropies."""
    edges = np.logspace(np.log10(floor), np.log10(4.0), bins + 1)
    starts, out = [], {}
    for label, dirs in groups.items():
        start = np.concatenate([probe_entropies(d, 0) for d in dirs])
        end = np.concatenate([probe_entropies(d, -1) for d in dirs])
        starts.append(start)
        out[label] = (start, end)
        ax.hist(
            np.clip(end, floor, None),
            bins=edges,
            histtype="step",
            lw=1.6,
            color=ALGO_COLORS.get(label.split()[0]),
            label=f"{label}, end",
            density=True,
        )
    if starts:
        ax.hist(
            np.clip(np.concatenate(starts), floor, None),
            bins=edges,
            color="0.6",
            alpha=0.5,
            label="start (base model)",
            density=True,
        )
    ax.set_xscale("log")
    ax.set_xlabel(f"per-token entropy (nats; values below {floor:g} drawn at {floor:g})")
    ax.set_ylabel("density")
    ax.grid(alpha=0.3)
    return out


def end_values(values: np.ndarray, n: int = 3) -> np.ndarray:
    """A run's end: its last ``n`` evaluations after the first (the warm start's). A short run
    (dynamic sampling spends a token budget in fewer steps) has fewer; the start's evaluation
    is never one of them, unless it is the only one."""
    return values[max(1, values.size - n) :] if values.size > 1 else values


def entropy_success_table(
    groups: dict[str, Sequence[Path]], window: int = 10
) -> list[dict[str, Any]]:
    """Per algorithm and seed: mean token entropy over the first and the last ``window``
    training steps, the ratio end/start, and held-out greedy success, pass@1 and pass@16 at
    the first evaluation and over the last three."""
    rows = []
    for label, dirs in groups.items():
        for d in dirs:
            records = load_metrics(d)
            _, ent = series(records, "entropy_mean")
            start = float(ent[:window].mean()) if ent.size else float("nan")
            end = float(ent[-window:].mean()) if ent.size else float("nan")
            row = {
                "algo": label,
                "seed": run_info(d)["seed"],
                "entropy_start": start,
                "entropy_end": end,
                "entropy_ratio": end / start if start > 0 else float("nan"),
            }
            for key, name in (
                ("heldout_greedy", "greedy"),
                ("heldout_pass@1", "pass1"),
                ("heldout_pass@16", "pass16"),
            ):
                _, values = series(records, key)
                row[f"{name}_start"] = float(values[0]) if values.size else float("nan")
                row[f"{name}_end"] = (
                    float(end_values(values).mean()) if values.size else float("nan")
                )
            rows.append(row)
    return rows


def covariance_table(groups: dict[str, Sequence[Path]]) -> list[dict[str, Any]]:
    """Per algorithm (seeds pooled): the mean of ``cov_logp_adv`` and ``cov_logp_update`` over
    steps, the mean measured entropy change per step, and the correlation over steps of each
    covariance with the entropy change (Cui et al. predict a negative one)."""
    rows = []
    for label, dirs in groups.items():
        records = [r for d in dirs for r in load_metrics(d)]
        row: dict[str, Any] = {"algo": label}
        for key in ("cov_logp_adv", "cov_logp_update"):
            x, y, _ = entropy_change_points(records, key)
            row[f"mean_{key}"] = float(x.mean()) if x.size else float("nan")
            row[f"r_{key}"] = (
                float(np.corrcoef(x, y)[0, 1])
                if x.size > 2 and x.std() and y.std()
                else float("nan")
            )
            row["mean_entropy_change"] = float(y.mean()) if y.size else float("nan")
        row["steps"] = int(x.size)
        rows.append(row)
    return rows


def entropy_law_fit(
    groups: dict[str, Sequence[Path]], success_key: str = "heldout_greedy", window: int = 10
) -> list[dict[str, Any]]:
    """Least-squares fit of Cui et al.'s ``R = −a·exp(H) + b`` per algorithm (seeds pooled):
    ``R`` the held-out success at each evaluation, ``H`` the mean token entropy of the
    ``window`` training steps before it. Returns ``a``, ``b``, R² of the fit and the number of
    points. The law is linear in ``exp(H)``, so this is an ordinary linear regression."""
    rows = []
    for label, dirs in groups.items():
        xs, ys = [], []
        for d in dirs:
            records = load_metrics(d)
            e_steps, ent = series(records, "entropy_mean")
            s_steps, succ = series(records, success_key)
            for step, value in zip(s_steps, succ):
                before = ent[(e_steps <= step) & (e_steps > step - window)]
                if step > 0 and before.size:
                    xs.append(float(np.exp(before.mean())))
                    ys.append(float(value))
        if len(xs) < 3:
            continue
        x, y = np.asarray(xs), np.asarray(ys)
        slope, intercept = np.polyfit(x, y, 1)
        residual = y - (slope * x + intercept)
        r2 = 1 - residual.var() / y.var() if y.var() > 0 else float("nan")
        rows.append({"algo": label, "a": -slope, "b": intercept, "r2": r2, "points": len(xs)})
    return rows


def format_rows(rows: Sequence[dict[str, Any]], floatfmt: str = ".3f") -> str:
    """A plain-text table of a list of dicts that share their keys."""
    if not rows:
        return "(no rows)"
    keys = list(rows[0])
    cells = [
        [format(r[k], floatfmt) if isinstance(r[k], float) else str(r[k]) for k in keys]
        for r in rows
    ]
    widths = [max(len(k), *(len(c[i]) for c in cells)) for i, k in enumerate(keys)]
    lines = [
        "  ".join(k.rjust(w) for k, w in zip(keys, widths)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def token_grid(
    ax,
    tokens: Sequence[Sequence[str]],
    values: np.ndarray,
    *,
    cmap: str = "RdBu",
    vmin: float | None = None,
    vmax: float | None = None,
    norm=None,
    row_labels: Sequence[str] | None = None,
    fontsize: float = 9,
    fmt: str | None = None,
):
    """Draw completions as rows of cells, one per token, coloured by ``values`` (``[G, T]``,
    NaN or beyond a row's length: blank) with the token written in each cell (and its value
    when ``fmt`` is given, e.g. ``"{:+.1f}"``). Returns the image for a colorbar."""
    values = np.asarray(values, dtype=float)
    G, T = values.shape
    shown = np.full((G, T), np.nan)
    for i, row in enumerate(tokens):
        n = min(len(row), T)
        shown[i, :n] = values[i, :n]
    if norm is None and vmax is None:
        vmax = float(np.nanmax(np.abs(shown))) if np.isfinite(shown).any() else 1.0
        vmax = vmax or 1.0
        vmin = -vmax if vmin is None else vmin
    im = ax.imshow(
        np.ma.masked_invalid(shown),
        cmap=cmap,
        vmin=None if norm else vmin,
        vmax=None if norm else vmax,
        norm=norm,
        aspect="auto",
        interpolation="nearest",
    )
    cm = im.cmap
    for i, row in enumerate(tokens):
        for t, tok in enumerate(row[:T]):
            v = shown[i, t]
            rgba = cm(im.norm(v)) if np.isfinite(v) else (1, 1, 1, 1)
            dark = 0.299 * rgba[0] + 0.587 * rgba[1] + 0.114 * rgba[2] < 0.5
            label = {"<eos>": "⏎", " ": "␣"}.get(tok, tok)
            if fmt and np.isfinite(v):
                label += "\n" + fmt.format(v)
            ax.text(
                t,
                i,
                label,
                ha="center",
                va="center",
                fontsize=fontsize,
                color="white" if dark else "black",
                family="monospace",
            )
    ax.set_xticks(np.arange(-0.5, T, 1), minor=True)
    ax.set_yticks(np.arange(-0.5, G, 1), minor=True)
    ax.grid(which="minor", color="white", lw=1.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks([])
    ax.set_yticks(
        range(G),
        row_labels if row_labels is not None else [str(i) for i in range(G)],
        fontsize=fontsize,
    )
    for spine in ax.spines.values():
        spine.set_visible(False)
    return im


def plot_token_advantages(
    advantages: dict[str, np.ndarray],
    tokens: Sequence[Sequence[str]],
    rewards: Sequence[float],
    entropies: np.ndarray | None = None,
    shared_scale: bool = False,
    fmt: str | None = None,
    width: float = 11.0,
    row_height: float = 0.32,
    ncols: int = 1,
    fontsize: float = 9,
):
    """One panel per entry of ``advantages`` (label → ``[G, T]``): the group's completions
    with each token coloured by its advantage (red < 0 < blue, white = 0). Each panel has its
    own symmetric colour scale unless ``shared_scale``. With ``entropies`` a first panel shows
    the rollout entropy of every token. Returns the figure."""
    panels = (
        [("rollout entropy H (nats)", np.asarray(entropies, dtype=float))]
        if entropies is not None
        else []
    )
    panels += [(k, np.asarray(v, dtype=float)) for k, v in advantages.items()]
    G = len(tokens)
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(
        nrows, ncols, squeeze=False, figsize=(width, nrows * (G * row_height + 0.45))
    )
    labels = [f"{'✓' if r >= 0.5 else '✗'} r={r:g}" for r in rewards]
    common = max(float(np.nanmax(np.abs(v))) for k, v in advantages.items()) or 1.0
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (title, values) in zip(axes.flat, panels):
        if title.startswith("rollout entropy"):
            im = token_grid(
                ax,
                tokens,
                values,
                cmap="Greens",
                vmin=0.0,
                vmax=float(np.nanmax(values)) or 1.0,
                row_labels=labels,
                fmt="{:.2f}" if fmt else None,
                fontsize=fontsize,
            )
        else:
            vmax = common if shared_scale else None
            im = token_grid(
                ax,
                tokens,
                values,
                cmap="RdBu",
                vmax=vmax,
                vmin=-vmax if vmax else None,
                row_labels=labels,
                fmt=fmt,
                fontsize=fontsize,
            )
        ax.set_title(title, fontsize=fontsize + 1, loc="left")
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.01)
    fig.tight_layout()
    return fig
