"""The learning benchmark's figures: of one run, over the seeds of a label, per task.

Per run, from its ``metrics.jsonl`` (held-out greedy success on 200 fixed problems every
``eval_every`` steps, standard error ≈ ±0.03):

* **tokens / steps to target**: the first evaluation at which the trailing mean of three
  consecutive evaluations reaches ``target = base + target_gain`` (``base``: the warm start's
  held-out success, the same for every run of a task); "not reached" when it never does;
* **final success**: the evaluation at the end of the token budget, where every run stops
  and evaluates. One definition for every algorithm: dynamic sampling spends the budget in
  fewer steps (and evaluations), so "the last three evaluations" would average different
  parts of different runs;
* **AUC**: held-out success integrated over sampled tokens, divided by the budget (the mean
  success over training; the base rate for a run that never moves);
* **entropy start / end**: mean token entropy of the sampled completions at the first step
  (the warm start's policy, before any update) / over the last 10 % of steps; **collapsed**
  when ``end < collapse_ratio × start``. (The first step's batch holds thousands of tokens, so
  its mean is precise; a mean over the first few steps would already include the fast early
  fall of the first updates.)

Per algorithm: medians and interquartile ranges over seeds (a "not reached" seed counts as
+∞, so a median is "not reached" when half the seeds or more never got there).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from refimpl.diagnostics.entropy_attribution import attribution_table, prediction_table
from refimpl.runs.runlog import read_metrics

if TYPE_CHECKING:
    from refimpl.bench.learning_settings import LearningConfig, Run


def run_metrics(
    records: list[dict[str, Any]], budget: int, target: float, collapse_ratio: float
) -> dict[str, Any]:
    """The benchmark's figures of one run (see the module docstring)."""
    evals = [r for r in records if "heldout_greedy" in r]
    tokens = np.array([r.get("sampled_tokens", 0) for r in evals], dtype=float)
    success = np.array([r["heldout_greedy"] for r in evals], dtype=float)
    steps = np.array([r["step"] for r in evals], dtype=float)
    window = np.array([success[max(0, i - 2) : i + 1].mean() for i in range(success.size)])
    hit = np.flatnonzero(window >= target)
    # Area under success vs tokens, up to the budget, over the budget.
    x = np.clip(tokens, 0, budget)
    auc = float(np.trapezoid(success, x) / budget) if x[-1] > 0 else float(success[0])
    trained = [r for r in records if "entropy_mean" in r]
    ent = np.array([r["entropy_mean"] for r in trained], dtype=float)
    tail = max(5, len(ent) // 10)
    start_ent = float(ent[0]) if ent.size else math.nan  # the warm start's policy
    end_ent = float(ent[-tail:].mean()) if ent.size else math.nan

    def at_evals(key: str) -> np.ndarray:
        return np.array([r.get(key, math.nan) for r in evals], dtype=float)

    pass1, pass16 = at_evals("heldout_pass@1"), at_evals("heldout_pass@16")
    clip = [r.get("clip_frac_low", 0.0) + r.get("clip_frac_high", 0.0) for r in trained]
    mask = [r["kl_mask_frac"] for r in trained if "kl_mask_frac" in r]
    pairs = [
        (r["cov_logp_adv"], r["entropy_change"])
        for r in trained
        if "cov_logp_adv" in r and "entropy_change" in r
    ]
    cov = np.array(pairs, dtype=float).reshape(-1, 2)
    cov_r = (
        float(np.corrcoef(cov[:, 0], cov[:, 1])[0, 1])
        if len(cov) > 2 and cov[:, 0].std() > 0 and cov[:, 1].std() > 0
        else math.nan
    )
    # The end value: the evaluation at the end of the token budget (every run evaluates when
    # it stops), the same point of every run whatever its steps cost in tokens.
    return {
        "base": float(success[0]),
        "final": float(success[-1]),
        "gain": float(success[-1] - success[0]),
        "pass1_start": float(pass1[0]),
        "pass1_end": float(pass1[-1]),
        "pass16_start": float(pass16[0]),
        "pass16_end": float(pass16[-1]),
        "clip_frac": float(np.mean(clip)) if clip else math.nan,
        "mask_frac": float(np.mean(mask)) if mask else math.nan,
        "cov_mean": float(cov[:, 0].mean()) if len(cov) else math.nan,
        "cov_entropy_r": cov_r,
        "auc": auc,
        "tokens_to_target": float(tokens[hit[0]]) if hit.size else math.inf,
        "steps_to_target": float(steps[hit[0]]) if hit.size else math.inf,
        "steps": int(records[-1]["step"]),
        "sampled_tokens": int(records[-1].get("sampled_tokens", 0)),
        "entropy_start": start_ent,
        "entropy_end": end_ent,
        "entropy_ratio": end_ent / start_ent if start_ent > 0 else math.nan,
        "collapsed": bool(end_ent < collapse_ratio * start_ent),
        "kept_group_frac": float(np.mean([r.get("kept_group_frac", 1.0) for r in trained]))
        if trained
        else math.nan,
        "time_s": float(sum(r.get("time_step", 0.0) + r.get("time_eval", 0.0) for r in records)),
        "curve_tokens": tokens.tolist(),
        "curve_success": success.tolist(),
    }


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    """Median and IQR, with +∞ ("not reached") ordered last."""
    if not values:
        return math.nan, math.nan, math.nan
    never = 1e30  # +∞ stand-in: interpolating between two +∞ would give NaN
    q = np.quantile(np.minimum(np.array(values, dtype=float), never), [0.25, 0.5, 0.75])
    q = [math.inf if v >= never / 2 else float(v) for v in q]
    return q[1], q[0], q[2]


def summarize_seeds(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": len(per_run)}
    for key in ("tokens_to_target", "steps_to_target"):
        vals = [r[key] for r in per_run]
        med, lo, hi = _quantiles(vals)
        out[key] = {
            "median": med,
            "q25": lo,
            "q75": hi,
            "reached": sum(math.isfinite(v) for v in vals),
        }
    for key in (
        "final",
        "gain",
        "pass1_start",
        "pass1_end",
        "pass16_start",
        "pass16_end",
        "clip_frac",
        "mask_frac",
        "cov_mean",
        "cov_entropy_r",
        "auc",
        "entropy_start",
        "entropy_end",
        "entropy_ratio",
        "steps",
        "sampled_tokens",
        "kept_group_frac",
        "time_s",
    ):
        vals = np.array([r.get(key, math.nan) for r in per_run], dtype=float)
        out[key] = {
            "mean": float(vals.mean()),
            "std": float(vals.std(ddof=1)) if vals.size > 1 else 0.0,
            "median": float(np.median(vals)),
            "min": float(vals.min()),
        }
    out["collapsed"] = sum(r["collapsed"] for r in per_run)
    return out


def collect(cfg: LearningConfig, runs: list[Run], budgets: dict[str, int]) -> dict[str, Any]:
    """Per task: the base success, the target, per-run and per-label figures."""
    results: dict[str, Any] = {}
    for task in cfg.task_list():
        task_runs = [r for r in runs if r.task == task]
        if not task_runs:
            continue
        per_run = {}
        base = None
        for r in task_runs:
            records = read_metrics(r.train.run_dir)
            base = records[0]["heldout_greedy"] if base is None else base
        target = round(base + cfg.target_gain, 4)
        for r in task_runs:
            m = run_metrics(
                read_metrics(r.train.run_dir), budgets[task], target, cfg.collapse_ratio
            )
            per_run.setdefault(r.label, {})[r.seed] = m
        labels = list(dict.fromkeys(r.label for r in task_runs))
        by_label = {
            lab: [read_metrics(r.train.run_dir) for r in task_runs if r.label == lab]
            for lab in labels
        }
        results[task] = {
            "budget_tokens": budgets[task],
            "base": base,
            "target": target,
            "runs": per_run,
            "summary": {lab: summarize_seeds(list(per_run[lab].values())) for lab in labels},
            "entropy": {  # why entropy moves: predicted and attributed (seeds pooled)
                "prediction": prediction_table(by_label),
                "attribution": attribution_table(by_label),
            },
        }
    return results
