"""Helpers of the notebooks (``notebooks/0*.ipynb``): they draw on axes the caller owns and
return numbers the notebooks print, so that every claim in a text cell is read off a printed
value. The run and comparison figures of the CLI are in ``refimpl.plots``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from refimpl.contract import SUCCESS_THRESHOLD
from refimpl.plots import (
    ALGO_COLORS,
    end_values,
    entropy_change_points,
    load_metrics,
    load_probes,
    mean_curve,
    plt,  # pyplot, after plots chose the Agg backend
    run_info,
    series,
    smooth,
)


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


def success_labels(rewards: Sequence[float], success_threshold: float) -> list[str]:
    """A row label per completion: ✓ (reward ≥ ``success_threshold``) or ✗, and its reward."""
    return [f"{'✓' if r >= success_threshold else '✗'} r={r:g}" for r in rewards]


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
    success_threshold: float = SUCCESS_THRESHOLD,
):
    """One panel per entry of ``advantages`` (label → ``[G, T]``): the group's completions
    with each token coloured by its advantage (red < 0 < blue, white = 0). Each panel has its
    own symmetric colour scale unless ``shared_scale``. With ``entropies`` a first panel shows
    the rollout entropy of every token. Rows are labelled ✓ when their reward is
    ≥ ``success_threshold``. Returns the figure."""
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
    labels = success_labels(rewards, success_threshold)
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


def credit_example(result: dict, k: str) -> tuple[int, int]:
    """The two completions the token-credit figure shows, from one group whose outcomes are
    mixed (so the group-relative algorithms give them non-zero advantages): the failed one
    with the clearest wrong step (the most negative true advantage ``A*``), and the longest
    successful one of its group. ``result``: what ``refimpl credit`` writes."""
    comps = result["completions"]
    truth = result["oracle"][k]["true_advantage"]
    G = result["settings"]["group_size"]
    best, pick = None, None
    for g in range(len(comps) // G):
        rows = range(g * G, (g + 1) * G)
        won = [i for i in rows if comps[i]["success"]]
        lost = [i for i in rows if not comps[i]["success"]]
        if not won or not lost:
            continue
        failed = min(lost, key=lambda i: min(truth[i]))
        if best is None or min(truth[failed]) < best:
            best = min(truth[failed])
            pick = (failed, max(won, key=lambda i: len(comps[i]["token"])))
    if pick is None:  # no mixed group: the clearest failure and any success (or the next row)
        lost = [i for i, c in enumerate(comps) if not c["success"]] or [0]
        failed = min(lost, key=lambda i: min(truth[i]))
        won = [i for i, c in enumerate(comps) if c["success"]] or [(failed + 1) % len(comps)]
        pick = (failed, won[0])
    return pick


def plot_completion_credit(
    result: dict, *, k: str = "32", algos=("grpo", "gtpo", "grpo_s", "tepo")
):
    """Two completions of one group (``credit_example``), each token coloured by its true
    advantage ``A*`` (the oracle's, from ``k`` rollouts per prefix) and by each algorithm's
    advantage on the same batch: blue = credited, red = blamed, white = 0. Each row has its
    own symmetric colour scale (its largest |value| is in its label), so rows compare by
    *where* they put credit, not by size. Returns the figure."""
    from toy_envs import TOKENIZER

    comps = result["completions"]
    panels = []
    for i in credit_example(result, k):
        c = comps[i]
        tokens = c.get("token_text") or [TOKENIZER.itos[t] for t in c["token"]]
        rows = [("A* (oracle)", np.asarray(result["oracle"][k]["true_advantage"][i]))]
        rows += [(name, np.asarray(result["signals"][name]["advantages"][i])) for name in algos]
        panels.append((c, tokens, rows))
    width = max(len(p[1]) for p in panels)
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 0.3 * width + 2.5), 2 * (0.42 * 5 + 0.8)))
    for ax, (c, tokens, rows) in zip(axes, panels):
        scaled, labels = np.full((len(rows), width), np.nan), []
        for j, (name, v) in enumerate(rows):
            top = float(np.abs(v).max()) or 1.0
            scaled[j, : len(v)] = v / top
            labels.append(f"{name} (±{top:.2g})")
        token_grid(ax, [tokens] * len(rows), scaled, vmin=-1.0, vmax=1.0, row_labels=labels,
                   fontsize=8)  # fmt: skip
        verdict = "succeeded" if c["success"] else "failed"
        where = (
            f", first wrong token {c['first_wrong']}" if c.get("first_wrong") is not None else ""
        )
        ax.set_title(f"{c['prompt']} → {c['text']!r} ({verdict}{where})", fontsize=9, loc="left")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# Sizes: one switch, REFIMPL_NOTEBOOK_SIZE.
# ---------------------------------------------------------------------------------------------

#: The environment variable every notebook reads in its first cell.
SIZE_VARIABLE = "REFIMPL_NOTEBOOK_SIZE"

#: ``fast``: seconds per notebook, for the tests (the pictures are noise); ``small``: the
#: default, aimed at at most 15 minutes for the six notebooks on an idle 2-core machine
#: (notebooks/README.md has the measured times); ``full``: the long runs of the docs'
#: benchmarks (notebooks/README.md states their cost).
SIZES = ("fast", "small", "full")
DEFAULT_SIZE = "small"


def notebook_size(environ: dict[str, str] | None = None) -> str:
    """The size a notebook runs at: ``$REFIMPL_NOTEBOOK_SIZE``, ``small`` when unset or empty.
    Raises ``ValueError`` naming the choices on any other value (before anything runs). Every
    notebook calls it first, so it also makes the progress bars save their final state
    (``refimpl.notebook_outputs.bars_save_their_final_state``)."""
    import os

    value = (environ if environ is not None else os.environ).get(SIZE_VARIABLE, "").strip()
    size = value or DEFAULT_SIZE
    if size not in SIZES:
        raise ValueError(f"{SIZE_VARIABLE}: expected one of {', '.join(SIZES)}, got {value!r}")
    from refimpl.notebook_outputs import bars_save_their_final_state

    bars_save_their_final_state()
    return size


# ---------------------------------------------------------------------------------------------
# Notebook 02: advantages next to the effective credit −∂L/∂logp.
# ---------------------------------------------------------------------------------------------


def plot_advantages_and_credit(
    advantages: dict[str, np.ndarray],
    credit: dict[str, np.ndarray],
    tokens: Sequence[Sequence[str]],
    rewards: Sequence[float],
    fmt: str = "{:+.2f}",
    width: float = 14.0,
    row_height: float = 0.3,
    fontsize: float = 7,
    success_threshold: float = SUCCESS_THRESHOLD,
):
    """One row per algorithm: its advantages ``A[i,t]`` (left) and its effective credit
    (right, e.g. ``−∂L/∂logp`` scaled by the number of response tokens, from
    ``refimpl.bench.credit_batch.algorithm_signals``), every token's value written in its cell.
    All panels share ONE symmetric colour scale, so equal colours are equal values across
    algorithms and columns, and a panel differs from its neighbour exactly where the values do.
    Rows are labelled ✓ when their reward is ≥ ``success_threshold``. Returns ``(fig, vmax)``;
    the figure has ``2 × len(advantages)`` token panels and one colour bar."""
    names = list(advantages)
    if list(credit) != names:
        raise ValueError(f"credit names {list(credit)} differ from the advantages' {names}")
    G = len(tokens)
    values = [np.asarray(v, dtype=float) for n in names for v in (advantages[n], credit[n])]
    vmax = max(float(np.nanmax(np.abs(v))) for v in values) or 1.0
    fig, axes = plt.subplots(
        len(names),
        2,
        squeeze=False,
        figsize=(width, len(names) * (G * row_height + 0.45)),
    )
    labels = success_labels(rewards, success_threshold)
    im = None
    for row, name in zip(axes, names):
        for ax, kind, v in zip(row, ("advantage A", "credit −∂L/∂logp × Σ|o|"),
                               (advantages[name], credit[name])):  # fmt: skip
            im = token_grid(
                ax, tokens, v, cmap="RdBu", vmin=-vmax, vmax=vmax, row_labels=labels, fmt=fmt,
                fontsize=fontsize,
            )  # fmt: skip
            ax.set_title(f"{name}: {kind}", fontsize=fontsize + 2, loc="left")
    fig.tight_layout()
    fig.colorbar(im, ax=axes.ravel().tolist(), fraction=0.02, pad=0.01,
                 label=f"one scale for every panel (±{vmax:.2f})")  # fmt: skip
    return fig, vmax


def differs_from(
    reference: np.ndarray, others: dict[str, np.ndarray], mask: np.ndarray, atol: float = 1e-6
) -> dict[str, int]:
    """Per entry of ``others``: on how many tokens (``mask`` > 0) it differs from
    ``reference`` by more than ``atol`` (0: the same values everywhere)."""
    m = np.asarray(mask) > 0
    ref = np.asarray(reference, dtype=float)
    return {
        k: int((np.abs(np.asarray(v, dtype=float) - ref) > atol)[m].sum())
        for k, v in others.items()
    }
