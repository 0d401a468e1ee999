"""Readings of a held-out learning curve, on both testbeds: steps to a threshold and the
censored time to it, TEPO's time ratio ("half the time"), the area under the curve, the worst
fall between evaluations and a common grid of sampled tokens; and docs/claims.md's convergence
table.
"""

from __future__ import annotations

import math

import numpy as np
from arms import NAMES
from real_runs import REAL_THRESHOLD_GAIN, final, grid_seeds, looks, seeds_of
from toy_testbed import toy_crossing, toy_runs
from wording import describe, fmt, fmt_interval, seed_list, table

from refimpl.bench import stats as st
from refimpl.bench.stats import Comparison, Interval, over_seeds, rates


def steps_to(result: dict, base: dict, threshold: float) -> tuple[float, float]:
    """(first evaluated step at or above the threshold, linearly interpolated step); inf if
    never. Step 0 is the base model's evaluation."""
    points = [(0, base["success"])] + [(e["step"], e["success"]) for e in result["evals"]]
    for (s0, y0), (s1, y1) in zip(points, points[1:]):
        if y1 >= threshold:
            frac = (threshold - y0) / (y1 - y0) if y1 > y0 and y0 < threshold else 0.0
            return float(s1), s0 + frac * (s1 - s0)
    return math.inf, math.inf


def real_crossing(result: dict, base: dict, threshold: float) -> Interval:
    """The censored time (in optimizer steps) to the threshold: (previous evaluation, first
    evaluation at or above it], or after the last evaluation."""
    grid = [0] + [e["step"] for e in result["evals"]]
    first = next((i + 1 for i, e in enumerate(result["evals"]) if e["success"] >= threshold),
                 None)  # fmt: skip
    return st.crossing(grid, first)


def real_times(real: dict, arm: str, seeds: list[int]) -> dict[int, Interval]:
    out = {}
    for s in seeds:
        if (arm, s) in real:
            base = final(real[("base", s)])
            out[s] = real_crossing(real[(arm, s)], base, base["success"] + REAL_THRESHOLD_GAIN)
    return out


def speed(times: dict[str, dict], base: str, unit: str, scale: float = 1.0) -> tuple[str, str]:
    """TEPO ÷ ``base``: the verdict on "half the time" and the numbers behind it (per-seed
    ratio bounds of the censored times, on the seeds both have, and their median's bounds)."""
    seeds = [s for s in times["tepo"] if s in times.get(base, {})]
    if not seeds:
        return f"against {NAMES[base]}: not measured", ""
    bounds = [st.ratio_bounds(times["tepo"][s], times[base][s]) for s in seeds]
    lo, hi = st.median_bounds(bounds)
    per = ", ".join(f"seed {s} {st.fmt_bounds(*b)}" for s, b in zip(seeds, bounds))
    first = sum(times[base][s].lo == 0 for s in seeds)
    return (
        f"against {NAMES[base]}: {st.speed_verdict(lo, hi)}",
        f"TEPO ÷ {NAMES[base]} ({unit}) per seed: {per}; median {st.fmt_bounds(lo, hi)} over "
        f"{len(seeds)} seeds ({NAMES[base]} there by the first evaluation in {first} of "
        f"{len(seeds)})",
    )


def auc_compare(real: dict, a: str, b: str) -> Comparison:
    """Per seed, a − b of the mean held-out success over every evaluation after the start (an
    area under the learning curve), on the seeds where both have the same several
    evaluations."""
    per = {}
    for s in grid_seeds(real, (a, b)):
        ra = np.mean([rates(e) for e in real[(a, s)]["evals"]], axis=0)
        rb = np.mean([rates(e) for e in real[(b, s)]["evals"]], axis=0)
        per[s] = float((ra - rb).mean())
    return over_seeds(per, looks=looks(a, b, per))


def worst_drop(curve) -> float:
    """The largest fall of held-out success between two consecutive evaluations (0 if none)."""
    c = np.asarray(list(curve), dtype=float)
    return float(max(0.0, np.max(c[:-1] - c[1:]))) if c.size > 1 else 0.0


def real_curve(real: dict, arm: str, seed: int) -> list[float]:
    return [final(real[("base", seed)])["success"]] + [
        e["success"] for e in real[(arm, seed)]["evals"]
    ]


CONVERGENCE_ARMS = ("grpo", "dapo", "dapo_noshape", "tepo", "gtpo", "grpo_s")


def real_convergence_table(real: dict) -> str:
    arms = [a for a in CONVERGENCE_ARMS if seeds_of(real, a)]
    seeds = grid_seeds(real, arms)
    steps = [e["step"] for e in real[(arms[0], seeds[0])]["evals"]] if seeds else []
    head = ["arm", "seed", "threshold", "success at step 0 → " + " → ".join(map(str, steps)),
            "first evaluation ≥ threshold", "time to the threshold (steps)",
            "interpolated step"]  # fmt: skip
    rows, firsts = [], {}
    for arm in arms:
        for s in seeds:
            base = final(real[("base", s)])
            thr = base["success"] + REAL_THRESHOLD_GAIN
            first, interp = steps_to(real[(arm, s)], base, thr)
            t = real_crossing(real[(arm, s)], base, thr)
            firsts.setdefault(arm, []).append(t.lo == 0)
            curve = [base["success"]] + [e["success"] for e in real[(arm, s)]["evals"]]
            rows.append([NAMES[arm], str(s), fmt(thr), " → ".join(fmt(c) for c in curve),
                         "not reached" if math.isinf(first) else str(int(first)),
                         fmt_interval(t), "not reached" if math.isinf(interp)
                         else f"{interp:.1f}"])  # fmt: skip
    if not rows:
        return "(no seed has evaluations at several steps)\n"
    later = sorted({s for _, s in real} - set(seeds))
    firsts_line = "; ".join(f"{NAMES[a]} {sum(v)}/{len(v)}" for a, v in firsts.items())
    times = {a: real_times(real, a, seeds) for a in ("tepo", "grpo", "dapo")}
    ratios = [speed(times, b, "steps")[1] for b in ("grpo", "dapo")]
    areas = [describe(auc_compare(real, "tepo", b), f"TEPO − {NAMES[b]}") for b in ("grpo", "dapo")]
    return (
        table(head, rows)
        + f"\nSeeds {seed_list(seeds)} (evaluated after steps {', '.join(map(str, steps))})"
        + (f"; seeds {seed_list(later)} were evaluated after the last step only and are not "
           "in this table" if later else "")
        + f". Runs at or above the threshold by the first evaluation (step {steps[0]}): "
        + firsts_line + ".\n\n" + ".\n\n".join(r for r in ratios if r)
        + ".\n\nMean held-out success over the evaluations (the area under the curve), "
        + "paired by seed: " + "; ".join(areas) + ".\n"
    )  # fmt: skip


def toy_speed(toy: dict | None) -> tuple[str, str]:
    """TEPO's time to the toy target against GRPO and DAPO, in sampled tokens (the budget's
    unit: a dynamic-sampling step resamples until its batch is full, about 2.4× a GRPO step's
    tokens), censored as on the real model."""
    if toy is None or "tepo" not in toy_runs(toy):
        return "not measured", ""
    runs = toy_runs(toy)
    times = {a: {int(s): toy_crossing(x) for s, x in runs[a].items()}
             for a in ("grpo", "dapo", "tepo") if a in runs}  # fmt: skip
    parts = [speed(times, b, "sampled tokens") for b in ("grpo", "dapo") if b in times]
    per = "; ".join(f"{NAMES[a]} " + ", ".join(fmt_interval(t, 1e3) for t in v.values())
                    for a, v in times.items())  # fmt: skip
    return ("; ".join(p[0] for p in parts),
            f"toy: sampled tokens (k) to the target per seed, {per}; "
            + "; ".join(p[1] for p in parts))  # fmt: skip


def real_speed(real: dict) -> tuple[str, str]:
    seeds = grid_seeds(real, ("tepo", "grpo", "dapo"))
    if not seeds:
        return "not measured", ""
    times = {a: real_times(real, a, seeds) for a in ("tepo", "grpo", "dapo")}
    parts = [speed(times, b, "optimizer steps") for b in ("grpo", "dapo")]
    steps = [e["step"] for e in real[("tepo", seeds[0])]["evals"]]
    per = "; ".join(f"{NAMES[a]} " + ", ".join(fmt_interval(t) for t in v.values())
                    for a, v in times.items())  # fmt: skip
    areas = "; ".join(describe(auc_compare(real, "tepo", b), f"mean success over the "
                               f"evaluations TEPO − {NAMES[b]}") for b in ("grpo", "dapo"))  # fmt: skip
    return ("; ".join(p[0] for p in parts),
            f"real: steps to base + {REAL_THRESHOLD_GAIN:.2f} per seed (evaluations after steps "
            f"{', '.join(map(str, steps))}), {per}; " + "; ".join(p[1] for p in parts)
            + f"; {areas}")  # fmt: skip
