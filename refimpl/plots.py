"""Figures of runs and comparisons, shared by the CLI, ``make demo`` and the notebooks.

Everything reads the run directories the trainer writes (``metrics.jsonl``, ``probes.jsonl``,
``config.json``), so a figure can be redrawn from any finished or interrupted run.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files, not windows: runs on headless machines and in tests

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

#: One colour per algorithm, the same in every figure of the project.
ALGO_COLORS = {
    "grpo": "#1f77b4", "dapo": "#ff7f0e", "dr_grpo": "#8c564b", "gspo": "#7f7f7f",
    "gpg": "#bcbd22", "gtpo": "#2ca02c", "grpo_s": "#17becf", "tepo": "#d62728",
}


def load_metrics(run_dir: Path | str) -> list[dict[str, Any]]:
    """The records of ``run_dir/metrics.jsonl`` (one per step, plus step 0's evaluation)."""
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_probes(run_dir: Path | str) -> list[dict[str, Any]]:
    """The entropy snapshots of ``run_dir/probes.jsonl``."""
    path = Path(run_dir) / "probes.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_info(run_dir: Path | str) -> dict[str, Any]:
    """Algorithm, task and seed of a run (from its ``config.json``)."""
    state = json.loads((Path(run_dir) / "config.json").read_text())
    tc = state["train_config"]
    return {"algo": tc["algo"], "task": tc["task"], "seed": tc["seed"],
            "algo_args": tc.get("algo_args", [])}


def series(records: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """``(steps, values)`` of the records that carry ``key``."""
    pts = [(r["step"], r[key]) for r in records if key in r and r[key] is not None]
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
    ("reward_mean", "training reward", 10),
    ("heldout_greedy", "held-out success (greedy)", 1),
    ("entropy_mean", "mean token entropy (nats)", 10),
    ("length_mean", "completion length (tokens)", 10),
)


def plot_run(run_dir: Path | str, out: Path | str | None = None) -> Path:
    """Reward, held-out success, entropy and length vs step of one run → ``curves.png``."""
    run_dir = Path(run_dir)
    records = load_metrics(run_dir)
    info = run_info(run_dir)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 3.2))
    color = ALGO_COLORS.get(info["algo"], "k")
    for ax, (key, title, window) in zip(axes, PANELS):
        steps, values = series(records, key)
        if window > 1 and values.size:
            ax.plot(steps, values, color=color, alpha=0.25, lw=0.8)
        ax.plot(steps, smooth(values, window), color=color, lw=1.8,
                marker="o" if window == 1 else None, ms=3)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
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


def mean_curve(run_dirs: Sequence[Path], key: str, window: int = 1
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


def plot_compare(run_dirs: Sequence[Path | str], out: Path | str,
                 panels: Sequence[tuple[str, str, int]] = PANELS) -> Path:
    """Every algorithm's curves in one figure: mean over seeds, band = min..max over seeds."""
    groups = group_runs(run_dirs)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for label, dirs in groups.items():
        color = ALGO_COLORS.get(label.split()[0], None)
        for ax, (key, _title, window) in zip(axes, panels):
            steps, mean, lo, hi = mean_curve(dirs, key, window)
            if steps.size == 0:
                continue
            ax.plot(steps, mean, color=color, lw=1.8, label=f"{label} (n={len(dirs)})",
                    marker="o" if window == 1 else None, ms=3)
            if len(dirs) > 1:
                ax.fill_between(steps, lo, hi, color=color, alpha=0.15)
    for ax, (_key, title, _w) in zip(axes, panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
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
        grid[i, :min(len(r), width)] = r[:width]
    im = ax.imshow(grid, aspect="auto", origin="lower", cmap="magma",
                   extent=(-0.5, width - 0.5, snaps[0]["step"], snaps[-1]["step"]))
    ax.set_xlabel("token position in the completion")
    ax.set_ylabel("RL step")
    return im


def summary_table(run_dirs: Sequence[Path | str], target: float) -> list[dict[str, Any]]:
    """Per algorithm: final held-out success, steps to reach ``target`` (greedy held-out
    success, per seed; None when not reached), and mean token entropy over the last 10 steps."""
    rows = []
    for label, dirs in group_runs(run_dirs).items():
        finals, reached, entropies, start = [], [], [], []
        for d in dirs:
            records = load_metrics(d)
            steps, success = series(records, "heldout_greedy")
            start.append(success[0] if success.size else float("nan"))
            finals.append(success[-1] if success.size else float("nan"))
            hit = steps[success >= target]
            reached.append(int(hit[0]) if hit.size else None)
            _, ent = series(records, "entropy_mean")
            entropies.append(float(ent[-10:].mean()) if ent.size else float("nan"))
        rows.append({"algo": label, "seeds": len(dirs), "start": float(np.mean(start)),
                     "final": float(np.mean(finals)), "steps_to_target": reached,
                     "entropy_end": float(np.mean(entropies))})
    return rows


def format_table(rows: Sequence[dict[str, Any]], target: float) -> str:
    """A plain-text table of :func:`summary_table`."""
    head = (f"{'algorithm':<28}{'seeds':>6}{'held-out start':>16}{'final':>8}"
            f"{f'steps to {target:.2f}':>18}{'entropy end':>13}")
    lines = [head, "-" * len(head)]
    for r in rows:
        reached = ",".join("-" if s is None else str(s) for s in r["steps_to_target"])
        lines.append(f"{r['algo']:<28}{r['seeds']:>6}{r['start']:>16.3f}{r['final']:>8.3f}"
                     f"{reached:>18}{r['entropy_end']:>13.3f}")
    return "\n".join(lines)
