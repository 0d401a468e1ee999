"""docs/credit.md's "What credit is worth", from the committed result files.

Reads ``results/runs.json`` (``collect.py``: every arm × seed of the ceiling benchmark that
``ceiling_study.py`` declares) and ``results/credit_*.json`` (``ceiling_study.py``'s credit experiments: each arm's credit agreement
on one long-chain warm-start batch), and writes the section's tables between the markers
``<!-- ceiling:NAME -->`` and ``<!-- /ceiling:NAME -->`` of docs/credit.md, and its figures
into docs/figures/. Nothing is trained or sampled. ``--check`` writes nothing and exits 1 when
a table differs from what the files give (``tests/test_ceiling_report.py`` runs it).

The statistics (``refimpl/bench/stats.py``, the one statistics module every page uses):
* a run's **gain** is its held-out pass@1 at the end of the token budget minus its first (the
  warm start's, the same for every arm of a seed). The end of the budget is update 20 for most
  arms, but an arm with dynamic sampling (the DAPO family) draws more tokens a step and is read
  at its last evaluation, after 9-11 updates (``readings.at_update``; the shares table's
  "updates read" column shows it), so every arm is read at the same sampled tokens, not at the
  same update. pass@1 is the mean success of 16 samples per problem at the training
  temperature, what the policy is trained to raise, and the least noisy figure of the
  evaluation (4,800 samples); held-out greedy success is reported beside it. This choice was
  made before any run of the benchmark finished;
* a comparison of two arms is the mean over the seeds both finished of their paired
  difference, s.e. = sd / √n, Student's t at n − 1 degrees of freedom, and its minimal
  detectable difference MDD = (t₀.₉₇₅ + t₀.₈₀) · s.e.; a study extended after a look
  (countdown: seeds 0-4 were read before seeds 5-19 were run, ``COUNTDOWN_LOOKS``) has every
  bar, p and MDD Bonferroni-corrected for its looks (t at 1 − 0.025 / looks);
* the **headroom** H = gain(VinePPO) − gain(GRPO); the regime can rank credit methods when
  H ≥ 3 · MDD (the issue's bar);
* while H < 3 MDD an arm is placed by its gain over GRPO, paired over the seeds both ran, with
  its 90 % t interval at n − 1 df; only once H ≥ 3 MDD, by its **share** of the ceiling,
  (gain − gain_GRPO) / (gain_VinePPO − gain_GRPO), with a 90 % paired bootstrap interval over
  seeds (the seeds resampled together for the three arms: ``stats.bootstrap_indices``);
  "unbounded" when more than 5 % of the resamples put the ceiling at or below GRPO.

    python scripts/experiments/ceiling/ceiling_page.py            # rewrite the tables and figures
    python scripts/experiments/ceiling/ceiling_page.py --check    # are they current?
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RESULTS = HERE / "results"
PAGE = ROOT / "docs" / "credit.md"
FIGURES = ROOT / "docs" / "figures"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "experiments"))
sys.path.insert(0, str(HERE))

import page_writer  # noqa: E402  (the lab's one page writer)
import warmup_rows  # noqa: E402  (the section with the learning-rate warm-up)
from collected_runs import check_collected, load_extra, load_runs  # noqa: E402
from page_writer import finite  # noqa: E402
from readings import (  # noqa: E402  (one run's and one pair's figures, shared with warmup_rows)
    BASELINE,
    CEILING,
    MATCHED,
    PRIMARY,
    THRESHOLD_MDD,
    UPDATES,
    at_update,
    common_seeds,
    comparison_cells,
    fmt,
    gain,
    gains_line,
    paired,
    table,
)

from refimpl.bench import stats  # noqa: E402  (the one statistics module)
from refimpl.bench.result_header import expect, read_result  # noqa: E402

#: The arms, in the order of the tables.
ARMS = (
    CEILING, BASELINE, MATCHED, "dapo", "gtpo", "gtpo alpha_2=0.0", "grpo_s", "tepo",
    "forking_tokens", "forking_tokens selection=random", "steer",
)  # fmt: skip
NAMES = dict(zip(ARMS, (
    "VinePPO (the ceiling)", "GRPO", "GRPO, β = 0", "DAPO", "GTPO", "GTPO, α₂ = 0", "GRPO-S",
    "TEPO", "forking tokens", "forking tokens, random 20 %", "STEER",
)))  # fmt: skip
#: Where each arm's credit agreement is read: (file stem, the algorithm's name in it).
CREDIT_FILES = {
    "gtpo alpha_2=0.0": ("credit_gtpo_alpha2_0", "gtpo"),
    "forking_tokens selection=random": ("credit_forking_random", "forking_tokens"),
}
CREDIT_DEFAULT = "credit_warmstart"
BOOTSTRAP = 10_000
#: Countdown was read after seeds 0-4 (H at 1.1 MDD) and then extended to seeds 5-19: two looks.
COUNTDOWN_LOOKS = 2


# ---------------------------------------------------------------------------------------------
# Per-run figures.
# ---------------------------------------------------------------------------------------------


def auc(run: dict) -> float:
    """Mean held-out pass@1 over the updates up to ``UPDATES`` (trapezoid on the grid)."""
    evals = [e for e in run["evals"] if e["step"] <= UPDATES]
    steps = np.array([e["step"] for e in evals], dtype=float)
    success = np.array([e[PRIMARY] for e in evals], dtype=float)
    return float(np.trapezoid(success, steps) / steps[-1]) if steps[-1] > 0 else success[0]


def entropy_ends(run: dict) -> tuple[float, float]:
    """The sampled tokens' entropy at the first step and over the last 5 steps."""
    h = run["entropy"]
    return float(h[0]), float(np.mean(h[-5:]))


def share_interval(arms: dict, label: str, key: str = PRIMARY) -> tuple[float, float, float, int]:
    """The arm's share of the ceiling and its 90 % paired bootstrap interval over seeds
    (NaN bounds: unbounded); the number of seeds it rests on."""
    seeds = common_seeds(arms, label, BASELINE, CEILING)
    if len(seeds) < 2:
        return math.nan, math.nan, math.nan, len(seeds)
    g = {
        lab: np.array([gain(arms[lab][s], key) for s in seeds])
        for lab in (label, BASELINE, CEILING)
    }
    num, den = g[label] - g[BASELINE], g[CEILING] - g[BASELINE]
    share = float(num.mean() / den.mean()) if den.mean() != 0 else math.nan
    idx = stats.bootstrap_indices(len(seeds), BOOTSTRAP, 0)
    num_b, den_b = num[idx].mean(axis=1), den[idx].mean(axis=1)
    if np.mean(den_b <= 0) > 0.05:
        return share, math.nan, math.nan, len(seeds)
    ratios = num_b[den_b > 0] / den_b[den_b > 0]
    lo, hi = np.quantile(ratios, [0.05, 0.95])
    return share, float(lo), float(hi), len(seeds)


# ---------------------------------------------------------------------------------------------
# Tables.
# ---------------------------------------------------------------------------------------------


def headroom_table(arms: dict, bases: tuple[str, ...] = (BASELINE, MATCHED), looks: int = 1) -> str:
    """H against GRPO and against GRPO without its KL term, on pass@1 and greedy success;
    ``looks``: how often the study was read before it stopped (its p and MDD corrected)."""
    rows = []
    for base in bases:
        for key, what in (("pass1", "pass@1"), ("greedy", "greedy success")):
            c = paired(arms, CEILING, base, key, looks)
            resolved = c is not None and c.diff >= THRESHOLD_MDD * c.mdd
            rows.append([f"VinePPO − {NAMES[base]}", what, *comparison_cells(c),
                         "yes" if resolved else "no"])  # fmt: skip
    header = ["headroom H", "on", "mean ± paired s.e.", "seeds (df)", "t", "p (two-sided)",
              "MDD", "H / MDD", "H ≥ 3 MDD"]  # fmt: skip
    return table(header, rows)


def ceiling_resolved(arms: dict) -> bool:
    """H ≥ 3 MDD against GRPO: only then is a share of the ceiling a fraction of something
    the design can tell from zero."""
    c = paired(arms, CEILING, BASELINE)
    return c is not None and c.diff >= THRESHOLD_MDD * c.mdd


def over_grpo(arms: dict, label: str) -> tuple[str, str]:
    """The arm's pass@1 gain minus GRPO's, paired over the seeds both have, and its 90 % t
    interval at n − 1 df (each read at the end of the same token budget)."""
    if label == BASELINE:
        return "0 (the floor)", "—"
    c = paired(arms, label, BASELINE)
    if c is None:
        return "n/a", "n/a"
    lo, hi = c.interval(0.90)
    return (
        f"{fmt(c.diff, sign=True)} ± {fmt(c.se)}",
        f"[{fmt(lo, sign=True)}, {fmt(hi, sign=True)}]",
    )


def share_table(arms: dict) -> str:
    """Every arm's gains; while the ceiling is not resolved (H < 3 MDD) its gain over GRPO
    with a t interval, and only once it is, its share of the ceiling with a bootstrap one."""
    resolved = ceiling_resolved(arms)
    rows = []
    for label in ARMS:
        runs = list(arms.get(label, {}).values())
        if not runs:
            rows.append([NAMES[label], "0", *["not run"] * 9])
            continue
        share, lo, hi, n = share_interval(arms, label)
        interval = "unbounded" if not math.isfinite(lo) else f"[{fmt(lo, 2)}, {fmt(hi, 2)}]"
        h0, h1 = np.mean([entropy_ends(r) for r in runs], axis=0)
        rows.append([
            NAMES[label], str(len(runs)),
            fmt(float(np.mean([at_update(r)["step"] for r in runs])), 1),
            gains_line(arms, label, "pass1"),
            gains_line(arms, label, "greedy"),
            fmt(np.mean([at_update(r)["pass1"] for r in runs])),
            fmt(np.mean([at_update(r)["pass16"] for r in runs])),
            f"{fmt(h0)} → {fmt(h1)}", fmt(np.mean([auc(r) for r in runs])),
            *((fmt(share, 2, sign=True), interval if n else "n/a") if resolved
              else over_grpo(arms, label)),
        ])  # fmt: skip
    last = (["share of the ceiling", "90 % interval (paired bootstrap)"] if resolved else
            ["gain − GRPO's, pass@1 (paired mean ± s.e.)", "90 % interval (t, n − 1 df)"])  # fmt: skip
    header = ["arm", "seeds", "updates read (mean)", "gain, pass@1 (mean ± s.e.)",
              "gain, greedy", "pass@1 there", "pass@16 there", "entropy start → end",
              "AUC (pass@1, over updates)", *last]  # fmt: skip
    return table(header, rows)


def _probe_row(what: str, arms: dict) -> list[str]:
    c = paired(arms, CEILING, BASELINE)
    minutes = [r["seconds"] / 60 for r in arms.get(CEILING, {}).values()]
    cells = comparison_cells(c)
    resolved = c is not None and c.diff >= THRESHOLD_MDD * c.mdd
    return [what, gains_line(arms, BASELINE, PRIMARY), gains_line(arms, CEILING, PRIMARY),
            cells[0], cells[1], cells[4], cells[5], "yes" if resolved else "no",
            fmt(float(np.median(minutes)), 1) if minutes else "n/a"]  # fmt: skip


def probes_table(arms: dict, results: Path) -> str:
    """The headroom of the design and of every probe (one setting changed), on pass@1."""
    rows = [_probe_row("the design (lr 1e-4)", arms)]
    for path in sorted(results.glob("probe_*.json")):
        data = read_result(path, "the ceiling's probes")
        probe = check_collected(data, path)
        expect(isinstance(data["probe"], str), path, "probe: expected the probe's name")
        rows.append(_probe_row(data["probe"] or path.stem, probe))
    header = ["regime", "GRPO gain", "VinePPO gain", "H ± paired s.e.", "seeds (df)", "MDD",
              "H / MDD", "H ≥ 3 MDD", "minutes per VinePPO run"]  # fmt: skip
    return table(header, rows)


def _h_sentence(c: stats.Comparison | None, against: str) -> str:
    if c is None:
        return f"Against {against}: fewer than two paired seeds."
    t = c.diff / c.se if c.se > 0 else math.nan
    ratio = c.diff / c.mdd if c.mdd > 0 else math.nan
    verdict = "resolved" if c.diff >= THRESHOLD_MDD * c.mdd else "not resolved"
    return (
        f"Against {against}, H = {c.diff:+.3f} ± {c.se:.3f} in pass@1 over {c.n} paired seeds "
        f"(t = {t:.2f} at {int(c.df)} df, {c.verdict()} by the t rule), with an MDD of "
        f"{c.mdd:.3f}: H is {ratio:.2f} times its MDD, {verdict} by the bar of 3."
    )


def reading_text(arms: dict) -> str:
    """The headline sentences of the section, computed (the prose around them quotes none)."""
    lines = [
        _h_sentence(paired(arms, CEILING, BASELINE), "GRPO"),
        _h_sentence(paired(arms, CEILING, MATCHED), "GRPO without its KL term"),
    ]
    h = paired(arms, CEILING, BASELINE)
    if h is None or h.diff < THRESHOLD_MDD * h.mdd:
        lines.append(
            "The ceiling is not resolved, so no arm below is given a share of it (a share would "
            "divide by a headroom this design cannot tell from zero with 80 % power): each arm "
            "is placed by its pass@1 gain over GRPO, paired over the seeds both ran, with a t "
            "interval."
        )
    kl = paired(arms, BASELINE, MATCHED)
    if kl is not None:
        lines.append(
            f"GRPO's KL term itself is worth {kl.diff:+.3f} ± {kl.se:.3f} of pass@1 gain (GRPO − "
            f"GRPO with β = 0, {kl.verdict()} by the t rule, MDD {kl.mdd:.3f})."
        )
    vine, grpo = arms.get(CEILING, {}), arms.get(BASELINE, {})
    if vine and grpo:
        med = lambda rs, k: float(np.median([r[k] for r in rs.values()]))  # noqa: E731
        tokens = (med(vine, "policy_tokens_per_step") + med(vine, "value_tokens_per_step")) / med(
            grpo, "policy_tokens_per_step"
        )
        lines.append(
            f"A VinePPO step samples {tokens:.0f} times GRPO's tokens and takes "
            f"{med(vine, 'seconds_per_step') / med(grpo, 'seconds_per_step'):.1f} times its "
            "wall time (medians over seeds)."
        )
    return "\n\n".join(lines)


def countdown_text(results: Path) -> str:
    arms = load_extra(results, "countdown")
    if arms is None:
        return "Not run yet (`ceiling_study.py`: countdown)."
    text = headroom_table(arms, (BASELINE,), COUNTDOWN_LOOKS)
    text += (
        f"\n\nRead at {COUNTDOWN_LOOKS} looks (seeds 0-4, then 0-19): the p is "
        f"{COUNTDOWN_LOOKS} times the one-look p and the MDD is taken at t at "
        f"1 − 0.025 / {COUNTDOWN_LOOKS} (Bonferroni over looks, `refimpl/bench/stats.py`)."
    )
    if arms.get(CEILING) and arms.get(BASELINE):
        med = lambda lab, k: float(np.median([r[k] for r in arms[lab].values()]))  # noqa: E731
        tokens = med(CEILING, "policy_tokens_per_step") + med(CEILING, "value_tokens_per_step")
        text += (
            f"\n\nA countdown VinePPO step samples {tokens / med(BASELINE, 'policy_tokens_per_step'):.0f}"
            f" times GRPO's tokens; a run took {med(CEILING, 'seconds') / 60:.1f} minutes against "
            f"GRPO's {med(BASELINE, 'seconds') / 60:.1f} (medians, two runs at a time). pass@16 "
            f"moved {_mean_change(arms[CEILING], 'pass16'):+.3f} under VinePPO and "
            f"{_mean_change(arms[BASELINE], 'pass16'):+.3f} under GRPO."
        )
    return text


def _mean_change(runs: dict, key: str) -> float:
    return float(np.mean([at_update(r)[key] - r["evals"][0][key] for r in runs.values()]))


def matched_text(arms: dict, results: Path) -> str:
    """GRPO given more sampled tokens per step (a larger G) against VinePPO, per seed."""
    matched = load_extra(results, "sample_matched")
    if matched is None or BASELINE not in matched:
        return "Not run yet (`ceiling_study.py`: sample matched)."
    runs = list(matched[BASELINE].values())
    group = sorted({r["policy_tokens_per_step"] for r in runs})
    both = {CEILING: arms.get(CEILING, {}), "matched": matched[BASELINE]}
    c = paired(both, CEILING, "matched")
    vine = list(arms.get(CEILING, {}).values())
    per_step = lambda rs, k: float(np.median([r[k] for r in rs])) if rs else math.nan  # noqa: E731
    vine_tokens = per_step(vine, "policy_tokens_per_step") + per_step(vine, "value_tokens_per_step")
    rows = [
        ["VinePPO (G = 8, its values included)", str(len(vine)), fmt(vine_tokens, 0),
         gains_line(arms, CEILING, PRIMARY), ""],
        ["GRPO, G = 64", str(len(runs)), fmt(float(np.median(group)), 0),
         gains_line(matched, BASELINE, PRIMARY), comparison_cells(c)[0]],
    ]  # fmt: skip
    header = ["arm (20 updates)", "seeds", "sampled tokens / step", "gain, pass@1",
              "VinePPO − this arm (paired)"]  # fmt: skip
    return table(header, rows) + "\n\n" + matched_sentence(c, len(runs))


def matched_sentence(c: stats.Comparison | None, seeds: int) -> str:
    """What the sample-matched comparison shows, by the t rule at its degrees of freedom."""
    if c is None:
        return "VinePPO and the sample-matched arm share fewer than two seeds: not compared."
    t = c.diff / c.se if c.se > 0 else math.nan
    says = {"holds": "VinePPO gains more pass@1 than GRPO with G = 64 in the same 20 updates",
            "contradicted": "GRPO with G = 64 gains more pass@1 than VinePPO in the same 20 updates",
            "not shown": "neither arm is shown to gain more pass@1 than the other in 20 updates"}  # fmt: skip
    return (f"VinePPO − GRPO with G = 64: {c.diff:+.3f} ± {c.se:.3f} over {c.n} paired seeds "
            f"(t = {t:.2f} at {int(c.df)} df, MDD {c.mdd:.3f}): {c.verdict()} by the t rule, "
            f"so {says[c.verdict()]}; on {seeds} seeds this is no finding about samples against "
            "credit.")  # fmt: skip


def grid_tables(arms: dict) -> str:
    """Held-out pass@1 on one grid of updates for every arm, and where each
    evaluation falls in sampled tokens (the policy's; VinePPO's values beside)."""
    # The design's grid (every 5 updates up to 20); an arm whose token budget ran out first
    # (fewer kept groups, longer completions) has blanks where it stopped.
    steps = list(range(0, UPDATES + 1, 5))
    rows_u, rows_t = [], []
    for label in ARMS:
        runs = list(arms.get(label, {}).values())
        if not runs:
            continue
        by_step = {s: [e for r in runs for e in r["evals"] if e["step"] == s] for s in steps}
        rows_u.append([NAMES[label]] + [fmt(np.mean([e[PRIMARY] for e in by_step[s]]))
                                        if by_step[s] else "" for s in steps])  # fmt: skip
        last = [at_update(r) for r in runs]
        policy = np.mean([e["sampled_tokens"] for e in last]) / 1e6
        values = np.mean([e["value_sampled_tokens"] for e in last]) / 1e6
        rows_t.append([NAMES[label], fmt(np.mean([at_update(r)["step"] for r in runs]), 1), fmt(policy, 2),
                       fmt(values, 2), fmt(policy + values, 2)])  # fmt: skip
    updates = table(["arm"] + [f"step {s}" for s in steps], rows_u)
    tokens = table(["arm", "updates", "policy's sampled tokens (M)",
                    "values' sampled tokens (M)", "all sampled tokens (M)"], rows_t)  # fmt: skip
    return updates + "\n\n" + tokens


def cost_table(arms: dict, machine: dict) -> str:
    rows = []
    for label in (CEILING, BASELINE):
        runs = list(arms.get(label, {}).values())
        if not runs:
            continue

        def med(key: str, runs: list[dict] = runs) -> float:
            return float(np.median([r[key] for r in runs]))

        value_tokens = med("value_tokens_per_step") if label == CEILING else 0.0
        rows.append([NAMES[label], fmt(med("policy_tokens_per_step"), 0),
                     fmt(value_tokens, 0), fmt(med("value_prefixes_per_step"), 0)
                     if label == CEILING else "0", fmt(med("seconds_per_step"), 1),
                     fmt(med("advantage_seconds_per_step"), 1),
                     fmt(med("seconds") / 60, 1)])  # fmt: skip
    header = ["arm", "policy tokens / step", "values' tokens / step", "prefixes valued / step",
              "s / step", "of which advantages (s)", "minutes / run"]  # fmt: skip
    where = (f"Medians over the finished seeds; {machine.get('cpu', 'unrecorded')}, one thread "
             "per run, two runs at a time on its 2 cores.")  # fmt: skip
    return table(header, rows) + "\n\n" + where


# ---------------------------------------------------------------------------------------------
# Credit agreement against share: the scatter.
# ---------------------------------------------------------------------------------------------


def agreement(results: Path, label: str, read: dict | None = None) -> tuple[float, str] | None:
    """The arm's within-completion r of credit against A* on the warm-start batch, at the
    file's largest K, and that K; None when its file is missing. ``read``: the files already
    read, by path (several arms share one)."""
    stem, name = CREDIT_FILES.get(label, (CREDIT_DEFAULT, label.split()[0]))
    path = results / f"{stem}.json"
    if not path.is_file():
        return None
    read = {} if read is None else read
    if path not in read:
        read[path] = read_result(path, "the ceiling's scatter")
    d = read[path]
    metrics = d["metrics"]
    expect(isinstance(metrics, dict) and metrics and all(k.isdigit() for k in metrics), path,
           "metrics: expected an object keyed by K")  # fmt: skip
    k = max(metrics, key=int)
    w = metrics[k]["signals"][name]["credit"]["within"]
    expect(isinstance(w["no_within_credit"], bool), path, "no_within_credit: expected a bool")
    if w["no_within_credit"]:
        return 0.0, k
    return finite(w["pearson"]["mean"], path, f"metrics.{k}.signals.{name}.credit.within"), k


def scatter_points(arms: dict, results: Path) -> list[dict]:
    """Each arm's credit agreement and what it learned: its share of the ceiling with the
    bootstrap interval once the ceiling is resolved, else its gain over GRPO with the t one."""
    resolved = ceiling_resolved(arms)
    points, read = [], {}
    for label in ARMS:
        got = agreement(results, label, read)
        if got is None:
            continue
        if resolved:
            y, lo, hi, n = share_interval(arms, label)
        elif label == BASELINE:
            y, lo, hi, n = 0.0, 0.0, 0.0, len(arms.get(label, {}))
        else:
            c = paired(arms, label, BASELINE)
            if c is None:
                continue
            (lo, hi), y, n = c.interval(0.90), c.diff, c.n
        if n < 2:
            continue
        points.append({"label": label, "r": got[0], "k": got[1], "y": y, "lo": lo, "hi": hi})
    return points


def scatter_text(arms: dict, results: Path) -> str:
    resolved = ceiling_resolved(arms)
    what = "share of the ceiling" if resolved else "gain − GRPO's, pass@1"
    points = scatter_points(arms, results)
    rows = [[NAMES[p["label"]], fmt(p["r"], 3, sign=True), fmt(p["y"], 2 if resolved else 3, sign=True)]
            for p in points]  # fmt: skip
    # The anchors (GRPO, VinePPO) and the matched-scale control (no credit of its own: GRPO's
    # advantages) are not ranked.
    free = [p for p in points if p["label"] not in (CEILING, BASELINE, MATCHED)]
    text = table(["arm", "credit agreement r (within completions)", what], rows)
    if len(free) >= 3 and all(math.isfinite(p["y"]) for p in free):
        rho, p = stats.exact_spearman([q["r"] for q in free], [q["y"] for q in free])
        k = points[0]["k"]
        text += (f"\n\nAcross the {len(free)} arms other than GRPO, VinePPO and the matched-scale "
                 f"control, Spearman's ρ between credit agreement (K = {k}) and {what} is "
                 f"{fmt(rho, 2, sign=True)} (exact permutation p = {fmt(p, 2)}, two-sided).")  # fmt: skip
        if not resolved:
            text += (
                " The ceiling is not resolved, so the arms are placed by their gain over "
                "GRPO, not by a share of a headroom this design cannot tell from zero."
            )
    else:
        text += "\n\nToo few arms with a finite figure to rank."
    return text


# ---------------------------------------------------------------------------------------------
# The page.
# ---------------------------------------------------------------------------------------------


def blocks(results: Path) -> dict[str, str]:
    arms = load_runs(results)
    machine = read_result(results / "runs.json", "the ceiling section")["machine"]
    return {
        "headroom": headroom_table(arms),
        "reading": reading_text(arms),
        "cost": cost_table(arms, machine),
        "shares": share_table(arms),
        "grid": grid_tables(arms),
        "probes": probes_table(arms, results),
        "countdown": countdown_text(results),
        "matched": matched_text(arms, results),
        "scatter": scatter_text(arms, results),
        "warmup": warmup_rows.warmup_text(arms, results),
    }


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--no-figure", action="store_true", help="tables only")


def curves_figure(arms: dict, out: Path) -> Path:
    """The section's learning curves (``figures.curves``) with this report's arms and names."""
    import figures  # the section's two figures, beside this file

    return figures.curves(arms, out, ARMS, NAMES, CEILING, PRIMARY)


def scatter_figure(arms: dict, results: Path, out: Path) -> Path | None:
    """Credit agreement against what each arm learned (``figures.scatter``): its share of the
    ceiling once it is resolved, else its gain over GRPO."""
    import figures

    ylabel = ("share of the ceiling (90 % bootstrap)" if ceiling_resolved(arms)
              else "pass@1 gain − GRPO's (90 % t interval)")  # fmt: skip
    return figures.scatter(scatter_points(arms, results), out, NAMES, CEILING, ylabel)


def _figures(args: argparse.Namespace) -> None:
    if args.no_figure:
        return
    arms = load_runs(args.results)
    FIGURES.mkdir(parents=True, exist_ok=True)
    curves_figure(arms, FIGURES / "ceiling_curves.png")
    scatter_figure(arms, args.results, FIGURES / "ceiling_scatter.png")


def main(argv: list[str] | None = None) -> int:
    """Exit 0 (written, or current with ``--check``), 1 (stale) or 2 (an input refused on
    one line, no page changed): ``page_writer.main``'s guarantees."""
    return page_writer.main(
        argv, prog="scripts/experiments/ceiling/ceiling_page.py", description=__doc__.split("\n\n")[0],
        prefix="ceiling", add_arguments=_arguments, after_write=_figures,
        build=lambda args: {args.page: blocks(args.results)}, inputs=lambda args: [args.results],
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
