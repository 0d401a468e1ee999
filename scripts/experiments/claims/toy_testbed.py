"""The toy testbed, the collapse benchmark's ``results.json``: each run's final success, arms
paired by seed, the runs' and pairs' tables of docs/claims.md, and the ``refimpl
bench-learning`` command that wrote the file.
"""

from __future__ import annotations

import math

import numpy as np
from arms import NAMES, TOY_DAPOS
from wording import COMPARISON_HEAD, comparison_cells, fmt, fmt_interval, table

from refimpl.bench import stats as st
from refimpl.bench.stats import Comparison, Interval, mean_se, over_seeds


def toy_runs(toy: dict) -> dict:
    return toy["results"]["countdown"]["runs"]


def toy_final(run: dict) -> float:
    """Held-out greedy success at the end of the token budget, where every run stops and
    evaluates: one point of every run (the benchmark's ``final`` since commit 602cc82; the
    first pass's file averaged the last two or three evaluations)."""
    return float(run["curve_success"][-1])


def toy_value(run: dict, key: str) -> float:
    return toy_final(run) if key == "final" else float(run[key])


def toy_compare(toy: dict | None, a: str, b: str, key: str = "final") -> Comparison:
    """Per-seed a − b (the same seed = the same warm start and RL seed), on the seeds both
    have."""
    if toy is None:
        return over_seeds({})
    ra, rb = toy_runs(toy).get(a, {}), toy_runs(toy).get(b, {})
    seeds = sorted((s for s in ra if s in rb), key=int)
    return over_seeds({int(s): toy_value(ra[s], key) - toy_value(rb[s], key) for s in seeds})


def toy_dapos(toy: dict | None, arm: str, key: str = "final") -> dict[str, Comparison]:
    """{DAPO arm's name: ``arm`` − that DAPO} on the toy."""
    return {NAMES[d]: toy_compare(toy, arm, d, key) for d in TOY_DAPOS}


def toy_crossing(run: dict) -> Interval:
    """The censored time, in sampled tokens, to the benchmark's target (the first evaluation
    where the trailing mean of three reaches it): (previous evaluation, that one]."""
    grid = run["curve_tokens"]
    t = run["tokens_to_target"]
    return st.crossing(grid, grid.index(t) if math.isfinite(t) else None)


def collapsed(toy: dict | None, arms) -> str:
    if toy is None:
        return ""
    runs = toy_runs(toy)
    return "toy runs collapsed (end < 0.5 × start): " + ", ".join(
        f"{NAMES[a]} {sum(x['collapsed'] for x in runs[a].values())}/{len(runs[a])}"
        for a in arms if a in runs
    )  # fmt: skip


def toy_table(toy: dict) -> str:
    res = toy["results"]["countdown"]
    head = ["run", "final held-out greedy, per seed", "mean ± s.e.", "entropy start → end",
            "collapsed", "sampled tokens to target (k), per seed", "clip frac", "TEPO mask",
            "pass@16 end"]  # fmt: skip
    rows = []
    old = False
    for label, per_seed in res["runs"].items():
        runs = [per_seed[s] for s in sorted(per_seed, key=int)]
        old |= any("end_evals" in r for r in runs)
        rows.append([
            NAMES.get(label, label),
            ", ".join(f"{toy_final(r):.3f}" for r in runs),
            fmt(*mean_se(toy_final(r) for r in runs)),
            f"{np.mean([r['entropy_start'] for r in runs]):.3f} → "
            f"{np.mean([r['entropy_end'] for r in runs]):.3f}",
            f"{sum(r['collapsed'] for r in runs)}/{len(runs)}",
            ", ".join(fmt_interval(toy_crossing(r), 1e3) for r in runs),
            f"{np.mean([r['clip_frac'] for r in runs]):.4f}",
            "—" if not all(math.isfinite(r["mask_frac"]) for r in runs)
            else f"{np.mean([r['mask_frac'] for r in runs]):.4f}",
            "—" if any("end_evals" in r for r in runs)
            else f"{np.mean([r['pass16_end'] for r in runs]):.3f}",
        ])  # fmt: skip
    note = ("\n*pass@16 end* is not in this file at the budget's end (its runs record the mean "
            "over their last evaluations), so it is left out.\n" if old else "")  # fmt: skip
    return (f"Warm start {res['base']:.3f}; target {res['target']:.3f} (warm start + 0.05); "
            f"budget {res['budget_tokens']:,} sampled tokens.\n\n" + table(head, rows) + note)  # fmt: skip


#: The toy's paired rows: (a, b, run figure).
TOY_PAIRS = (("gtpo", "dapo", "final"), ("gtpo", TOY_DAPOS[1], "final"),
             ("grpo_s", "dapo", "final"), ("grpo_s", TOY_DAPOS[1], "final"),
             (TOY_DAPOS[1], "dapo", "final"), ("gtpo", "gtpo alpha_2=0.0", "final"),
             ("gtpo alpha_2=0.0", "dapo", "final"), ("gtpo alpha_2=0.0", TOY_DAPOS[1], "final"),
             ("gtpo stats=batch", "dapo", "final"), ("gtpo stats=batch", TOY_DAPOS[1], "final"),
             ("tepo", "tepo kl_mask=False", "final"), ("tepo", "dapo", "final"),
             ("gtpo", "dapo", "entropy_end"), ("gtpo", TOY_DAPOS[1], "entropy_end"),
             ("grpo_s", "dapo", "entropy_end"), ("grpo_s", TOY_DAPOS[1], "entropy_end"),
             ("tepo", "dapo", "entropy_end"))  # fmt: skip


def toy_paired_table(toy: dict) -> str:
    head = ["difference (final held-out greedy)", "per seed", *COMPARISON_HEAD]
    rows = []
    for a, b, key in TOY_PAIRS:
        c = toy_compare(toy, a, b, key)
        if c.n:
            what = "" if key == "final" else f" ({key.replace('_', ' ')})"
            rows.append([f"{NAMES.get(a, a)} − {NAMES.get(b, b)}{what}",
                         ", ".join(f"{v:+.3f}" for v in c.per_seed.values()),
                         *comparison_cells(c)])  # fmt: skip
    return table(head, rows)


#: The flags of the toy command, always written out (the rest follow the preset).
TOY_FLAGS = ("seeds", "ablations", "ablation_tasks", "eval_every", "out", "workers")


def toy_command(config: dict) -> str:
    """The ``refimpl bench-learning`` command that wrote a results.json, from its recorded
    settings: the preset, every field that differs from the preset's, and TOY_FLAGS."""
    from refimpl.bench.learning_settings import LearningConfig

    preset = LearningConfig(preset=config["preset"]).with_preset(frozenset())
    parts = [f"--preset {config['preset']}"]
    for field in ("tasks", "algos", "seeds", "ablations", "ablation_tasks", "budget_steps",
                  "lr", "prompts_per_step", "group_size", "eval_every", "eval_problems",
                  "target_gain", "collapse_ratio", "out", "workers"):  # fmt: skip
        value = config[field]
        if field in TOY_FLAGS or value != getattr(preset, field):
            text = f'"{value}"' if " " in str(value) else f"{value}"
            parts.append(f"--{field.replace('_', '-')} {text}")
    # A results.json written before the warm-up existed records none: its runs had no warm-up.
    warmup = config.get("lr_warmup", 0)
    if warmup is not None and warmup != preset.train_defaults().lr_warmup:
        parts.append(f"--lr-warmup {warmup}")
    return "refimpl bench-learning " + " ".join(parts)
