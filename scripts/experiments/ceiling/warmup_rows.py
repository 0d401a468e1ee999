"""docs/credit.md's "The ceiling with the warm-up" (the experiments ``warmup`` and ``warmup lr3e-4`` of ``ceiling_study.py``), from
``results/warmup.json`` and ``results/warmup_lr*.json``: each arm's gain, the headroom against
GRPO per seed with its MDD, the warm-up's own effect on each arm, and the headroom at the larger
learning rates."""

from __future__ import annotations

from pathlib import Path

from collected_runs import load_extra
from readings import (
    BASELINE,
    CEILING,
    PRIMARY,
    THRESHOLD_MDD,
    common_seeds,
    comparison_cells,
    gain,
    gains_line,
    paired,
    table,
)

WARM = "lr_warmup=8"
#: The arms of ``warmup.json``: VinePPO as the runs above train it, as its authors run it where
#: this testbed allows, and GRPO, each with the warm-up.
WARM_CEILING, WARM_BASELINE = f"{CEILING} {WARM}", f"{BASELINE} {WARM}"
WARM_AUTHORS = f"{CEILING} whiten_advantages=True ppo_epochs=2 temperature=0.6 top_p=0.9 {WARM}"
WARM_NAMES = {
    WARM_CEILING: "VinePPO as above",
    WARM_AUTHORS: "VinePPO as its authors run it",
    WARM_BASELINE: "GRPO",
}
#: The learning rates of the warm-up probes (``warmup_lr<lr>.json``).
WARM_LRS = ("3e-4", "1e-3")


def _per_seed(arms: dict, a: str, b: str, key: str = PRIMARY) -> str:
    seeds = common_seeds(arms, a, b)
    return ", ".join(f"{gain(arms[a][s], key) - gain(arms[b][s], key):+.3f}" for s in seeds)


def _h_row(what: str, arms: dict, a: str, b: str, key: str = PRIMARY) -> list[str]:
    c = paired(arms, a, b, key)
    resolved = c is not None and c.diff >= THRESHOLD_MDD * c.mdd
    return [what, *comparison_cells(c), "yes" if resolved else "no", _per_seed(arms, a, b, key)]


def warmup_text(arms: dict, results: Path) -> str:
    """The ceiling re-measured with the warm-up: each arm's gain, H against GRPO (per seed,
    with its MDD), the warm-up's own effect on each arm (the same seeds without it, from
    ``runs.json``), and H at the larger learning rates."""
    warm = load_extra(results, "warmup")
    if warm is None:
        return "Not run yet (`ceiling_study.py`: warmup)."
    rows = []
    for label, name in WARM_NAMES.items():
        runs = warm.get(label, {})
        rows.append([name, str(len(runs)), gains_line(warm, label, "pass1"),
                     gains_line(warm, label, "greedy"),
                     ", ".join(f"{gain(runs[s]):+.3f}" for s in sorted(runs, key=int))])  # fmt: skip
    text = table(["arm (lr 1e-4, warm-up 8)", "seeds", "gain, pass@1", "gain, greedy",
                  "gain, pass@1, per seed"], rows)  # fmt: skip
    both = {**arms, **warm}
    rows = [
        _h_row("VinePPO as above − GRPO, with the warm-up", warm, WARM_CEILING, WARM_BASELINE),
        _h_row("VinePPO as its authors run it − GRPO, with the warm-up", warm, WARM_AUTHORS,
               WARM_BASELINE),
        _h_row("the same, greedy success", warm, WARM_AUTHORS, WARM_BASELINE, "greedy"),
        _h_row("VinePPO as its authors run it − VinePPO as above", warm, WARM_AUTHORS,
               WARM_CEILING),
        _h_row("VinePPO − GRPO, without the warm-up (the design above)", arms, CEILING, BASELINE),
        _h_row("the warm-up's effect on VinePPO (with − without)", both, WARM_CEILING, CEILING),
        _h_row("the warm-up's effect on GRPO (with − without)", both, WARM_BASELINE, BASELINE),
    ]  # fmt: skip
    for lr in WARM_LRS:
        probe = load_extra(results, f"warmup_lr{lr}")
        if probe is None:
            continue
        rows.append(_h_row(f"VinePPO − GRPO at lr {lr}, with the warm-up", probe, WARM_CEILING,
                           WARM_BASELINE))  # fmt: skip
        rows.append([f"(GRPO's gain at lr {lr}: {gains_line(probe, WARM_BASELINE, PRIMARY)}; "
                     f"VinePPO's: {gains_line(probe, WARM_CEILING, PRIMARY)})", *[""] * 8])  # fmt: skip
    header = ["comparison (pass@1 unless named)", "mean ± paired s.e.", "seeds (df)", "t",
              "p (two-sided)", "MDD", "diff / MDD", "≥ 3 MDD", "per seed"]  # fmt: skip
    return text + "\n\n" + table(header, rows) + "\n\n" + _reading(warm, results)


def _reading(warm: dict, results: Path) -> str:
    """The sentences the section's prose rests on, computed: is the ceiling resolved at any
    setting run, and by how much of its MDD."""
    settings = [("lr 1e-4, VinePPO as above", warm, WARM_CEILING),
                ("lr 1e-4, VinePPO as its authors run it", warm, WARM_AUTHORS)]  # fmt: skip
    for lr in WARM_LRS:
        probe = load_extra(results, f"warmup_lr{lr}")
        if probe is not None:
            settings.append((f"lr {lr}", probe, WARM_CEILING))
    parts, resolved = [], []
    for what, arms, ceiling in settings:
        c = paired(arms, ceiling, WARM_BASELINE)
        if c is None:
            continue
        ratio = c.diff / c.mdd if c.mdd > 0 else float("nan")
        parts.append(f"{what}: H = {c.diff:+.3f} ± {c.se:.3f} over {c.n} seeds, {ratio:.2f} MDD")
        if c.diff >= THRESHOLD_MDD * c.mdd:
            resolved.append(what)
    verdict = (f"resolved (H ≥ 3 MDD) at {', '.join(resolved)}" if resolved else
               "resolved at none of the settings run")  # fmt: skip
    return f"With the warm-up the ceiling is {verdict}: " + "; ".join(parts) + "."
