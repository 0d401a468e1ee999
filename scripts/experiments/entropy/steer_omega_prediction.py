"""STEER's Σ Ω beside ``entropy_change_pred`` as predictors of the measured entropy change, and
the band of the per-step entropy change: the figures of docs/algorithms/steer.md.

    .venv/bin/refimpl bench-learning --preset collapse --algos dapo,steer \\
        --ablations "steer lambda_min=1.0 lambda_max=1.0" --ablation-tasks countdown \\
        --workers 1 --out runs/bench/learning-collapse
    .venv/bin/python scripts/experiments/entropy/steer_omega_prediction.py \\
        runs/bench/learning-collapse/countdown/*

Runs are grouped by label (the algorithm and its ``--algo-args``), seeds pooled.

**Prediction** (runs whose loss logged Ω: STEER's). Every step logs the measured
``entropy_change``, the trainer's first-order prediction ``entropy_change_pred`` (the whole
network's, through the step's actual parameter change) and, from STEER's loss, ``omega_sum_p1``
and ``omega_sum_p2`` (Σ Ω over each loss call's tokens, with p = 1 and p = 2, averaged over
the step's loss calls: Σ Ω over the batch ÷ the number of loss calls) and
``omega_weighted_sum`` (Σ λΩ, the same with STEER's weights). Ω > 0 lowers a state's entropy,
so the Ω predictor is ``−Σ Ω``; its scale (the step size, Adam) is unknown, so only
correlations are compared: Pearson's r over steps, raw and after each run's 11-step running
mean (``refimpl.diagnostics.entropy_attribution.correlations``). The last column correlates −Σ Ω (p = 2)
with ``entropy_change_pred``: the single-state estimate against the whole network's.

**Band** (every run). The per-step measured ``entropy_change`` (nats): its mean, standard
deviation, 5th and 95th percentiles, and the mean of its absolute value, pooled over the
label's steps; the same per 1,000 sampled tokens (a step of the dynamic-sampling algorithms
trains on informative groups only and samples several rounds).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from refimpl.diagnostics.entropy_attribution import correlations
from refimpl.runs.runlog import read_metrics, read_run_config

#: The Ω predictors (logged key → the column's name); each enters as −Σ.
OMEGA_KEYS = {
    "omega_sum_p2": "-ΣΩ (p=2)",
    "omega_sum_p1": "-ΣΩ (p=1)",
    "omega_weighted_sum": "-ΣλΩ",
}


def label(run: Path) -> str:
    """The algorithm and its ``--algo-args``, as bench-learning labels a variant."""
    config = read_run_config(run)["train_config"]
    return " ".join([config["algo"], *config.get("algo_args", [])])


def step_records(run: Path) -> list[dict]:
    """The training steps of a run (the step-0 evaluation line has no entropy change)."""
    return [r for r in read_metrics(run) if "entropy_change" in r]


def with_predictors(records: list[dict]) -> list[dict]:
    """``records`` with ``pred:<key>`` = −Σ Ω added for each logged Ω key."""
    out = []
    for r in records:
        r = dict(r)
        for key in OMEGA_KEYS:
            if isinstance(r.get(key), (int, float)):
                r[f"pred:{key}"] = -r[key]
        out.append(r)
    return out


def prediction_rows(groups: dict[str, list[list[dict]]]) -> list[str]:
    rows = []
    for name, runs in groups.items():
        runs = [with_predictors(rs) for rs in runs]
        if not any("pred:omega_sum_p2" in r for rs in runs for r in rs):
            continue
        cells = []
        for key in ("entropy_change_pred", *(f"pred:{k}" for k in OMEGA_KEYS)):
            c = correlations(runs, key)
            cells.append(f"{c['r']:+.2f} / {c['r_detrended']:+.2f}")
        # The single-state estimate against the whole network's prediction.
        c = correlations(runs, "pred:omega_sum_p2", "entropy_change_pred")
        cells.append(f"{c['r']:+.2f} / {c['r_detrended']:+.2f}")
        steps = correlations(runs, "entropy_change_pred")["steps"]
        rows.append(f"| {name} | {len(runs)} | {steps} | " + " | ".join(cells) + " |")
    return rows


def band_row(name: str, runs: list[list[dict]]) -> str:
    change = np.array([r["entropy_change"] for rs in runs for r in rs], dtype=float)
    per_k = []
    for rs in runs:
        tokens = np.diff([0] + [r["sampled_tokens"] for r in rs])
        per_k += [r["entropy_change"] / t * 1000 for r, t in zip(rs, tokens) if t > 0]
    per_k = np.array(per_k)
    p5, p95 = np.percentile(change, [5, 95])
    q5, q95 = np.percentile(per_k, [5, 95])
    return (
        f"| {name} | {len(runs)} | {change.size} | {change.mean() * 1e3:+.2f} | "
        f"{change.std() * 1e3:.2f} | [{p5 * 1e3:+.2f}, {p95 * 1e3:+.2f}] | "
        f"{np.abs(change).mean() * 1e3:.2f} | {per_k.std() * 1e3:.3f} | "
        f"[{q5 * 1e3:+.3f}, {q95 * 1e3:+.3f}] |"
    )


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    groups: dict[str, list[list[dict]]] = defaultdict(list)
    for run in map(Path, argv):
        if (run / "metrics.jsonl").is_file():
            groups[label(run)].append(step_records(run))
    if not groups:
        print("no run directory with a metrics.jsonl among the arguments", file=sys.stderr)
        return 2
    print("Prediction of the measured entropy change, r raw / detrended (seeds pooled):\n")
    print(
        "| label | runs | steps | entropy_change_pred | "
        + " | ".join(OMEGA_KEYS.values())
        + " | -ΣΩ (p=2) vs entropy_change_pred |"
    )
    print("|---|---|---|---|" + "---|" * (len(OMEGA_KEYS) + 1))
    print("\n".join(prediction_rows(groups)))
    print(
        "\nBand of the measured entropy change per step (10⁻³ nats; per 1k sampled tokens: 10⁻³):\n"
    )
    print(
        "| label | runs | steps | mean | sd | 5–95 % | mean abs | sd per 1k tokens | "
        "5–95 % per 1k tokens |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, runs in groups.items():
        print(band_row(name, runs))
    print("\n" + json.dumps({name: len(runs) for name, runs in groups.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
