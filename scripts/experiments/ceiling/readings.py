"""The figures the ceiling's tables are built from: one run's gain at the end of the token
budget, and a pair of arms' paired difference with its t, p and MDD (``refimpl.bench.stats``,
the one statistics module). ``ceiling_page.py`` and ``warmup_rows.py`` both read them."""

from __future__ import annotations

import math

from refimpl.bench import stats

CEILING, BASELINE, MATCHED = "vineppo", "grpo", "grpo kl_coef=0.0"
#: The figure every gain, headroom and share is read on (greedy success is shown beside it).
PRIMARY = "pass1"
#: The update every gain is read at: the design's budget, 20 GRPO-sized steps.
UPDATES = 20
THRESHOLD_MDD = 3.0


def at_update(run: dict, update: int = UPDATES) -> dict:
    """The run's evaluation after ``update`` policy updates, or its last one when its token
    budget ended the run earlier. So every arm is read at the end of the same budget of
    sampled tokens, not at the same number of updates: an arm with dynamic sampling (the DAPO
    family) draws more tokens a step and is read at 9-11 updates, the others at 20 (the share
    table's "updates read" column shows it)."""
    return next((e for e in run["evals"] if e["step"] == update), run["evals"][-1])


def gain(run: dict, key: str = PRIMARY) -> float:
    return float(at_update(run)[key] - run["evals"][0][key])


def common_seeds(arms: dict, *labels: str) -> list[str]:
    sets = [set(arms.get(label, {})) for label in labels]
    return sorted(set.intersection(*sets), key=int) if sets else []


def paired(
    arms: dict, a: str, b: str, key: str = PRIMARY, looks: int = 1
) -> stats.Comparison | None:
    """gain(a) − gain(b) over the seeds both finished (``looks``: how often the study was read
    before it stopped, ``stats``' correction); None with fewer than two seeds."""
    seeds = common_seeds(arms, a, b)
    if len(seeds) < 2:
        return None
    per_seed = {s: gain(arms[a][s], key) - gain(arms[b][s], key) for s in seeds}
    return stats.over_seeds(per_seed, looks=looks)


def fmt(x: float, digits: int = 3, sign: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def comparison_cells(c: stats.Comparison | None) -> list[str]:
    if c is None:
        return ["n/a"] * 6
    ratio = c.diff / c.mdd if c.mdd > 0 else math.nan  # signed: a negative H is no ceiling
    return [f"{fmt(c.diff, sign=True)} ± {fmt(c.se)}", f"{c.n} ({int(c.df)})", fmt(c.t, 2),
            fmt(c.p, 3), fmt(c.mdd), fmt(ratio, 2)]  # fmt: skip


def gains_line(arms: dict, label: str, key: str) -> str:
    runs = list(arms.get(label, {}).values())
    mean, se = stats.mean_se([gain(r, key) for r in runs]) if runs else (math.nan, math.nan)
    return f"{fmt(mean, sign=True)} ± {fmt(se)}"
