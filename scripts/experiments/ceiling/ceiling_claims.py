"""The claims ledger's rows about what token credit is worth (docs/claims.md).

``scripts/experiments/claims/ceiling_rows.py`` adds these three rows to the ledger; they read the
ceiling's committed result files through ``ceiling_page.py`` beside this file, with its statistics:
VinePPO − GRPO (the ceiling), forking tokens − the random 20 %, GTPO − GRPO and its share.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("ceiling_report", HERE / "ceiling_page.py")
ceiling = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ceiling)
stats = ceiling.stats
CEILING, BASELINE = ceiling.CEILING, ceiling.BASELINE
at_update, paired, share_interval = ceiling.at_update, ceiling.paired, ceiling.share_interval
load_runs, RESULTS = ceiling.load_runs, ceiling.RESULTS


COMMAND = (
    "`python scripts/experiments/run_experiment.py scripts/experiments/ceiling/ceiling_study.py` "
    "(docs/credit.md, What credit is worth; `--runs /tmp/ceiling --out /tmp/ceiling-results` "
    "reruns it into empty directories)"
)


def _updates(arms: dict, *labels: str) -> str:
    """``"read at 11 and 20 updates, the same sampled tokens"``: where a pair is read."""
    means = [np.mean([at_update(r)["step"] for r in arms[lab].values()]) for lab in labels]
    same = "the same updates" if len({round(m) for m in means}) == 1 else "the same sampled tokens"
    return f"read at {' and '.join(f'{m:.0f}' for m in means)} updates, {same}"


def _numbers(c: stats.Comparison | None, what: str) -> tuple[str, str]:
    """(verdict, numbers) of a paired comparison of pass@1 gains, by the ledger's t rule."""
    if c is None:
        return "not measured", f"{what}: fewer than two paired seeds"
    seeds = ", ".join(f"{v:+.3f}" for v in c.per_seed.values())
    text = (
        f"{what} {c.diff:+.3f} ± {c.se:.3f} in pass@1 gain over {c.n} seeds (df {int(c.df)}, "
        f"MDD {c.mdd:.3f}; per seed {seeds})"
    )
    return c.verdict(), text


def ledger_rows(results: Path = RESULTS) -> list[list[str]]:
    """The ceiling, forking tokens against a random 20 %, and GTPO's share of the ceiling."""
    arms = load_runs(results)
    v_ceiling, n_ceiling = _numbers(paired(arms, CEILING, BASELINE), "long chain VinePPO − GRPO")
    v_fork, n_fork = _numbers(
        paired(arms, "forking_tokens", "forking_tokens selection=random"),
        "long chain forking tokens − random 20 %",
    )
    n_ceiling += f"; {_updates(arms, CEILING, BASELINE)}"
    n_fork += f"; {_updates(arms, 'forking_tokens', 'forking_tokens selection=random')}"
    v_gtpo, n_gtpo = _numbers(paired(arms, "gtpo", BASELINE), "long chain GTPO − GRPO")
    n_gtpo += f" ({_updates(arms, 'gtpo', BASELINE)})"
    share, lo, hi, n = share_interval(arms, "gtpo")
    bounds = "unbounded" if not math.isfinite(lo) else f"[{lo:+.2f}, {hi:+.2f}]"
    n_gtpo += f"; its share of the ceiling {share:+.2f}, 90 % interval {bounds} ({n} seeds)"
    not_real = "not run (no real-model arm)"
    return [
        ["Accurate credit (VinePPO's Monte-Carlo values) learns faster than a uniform advantage",
         "“Can improved credit assignment enhance RL training for LLMs?” (VinePPO v2 abstract); "
         "VinePPO “consistently outperforms PPO and other baselines” (VinePPO v2 abstract; its "
         "Figure 2 sets its credit against GRPO's and RLOO's)", v_ceiling, not_real, n_ceiling, COMMAND],
        ["Training on the top-20 % entropy tokens beats a random 20 % (forking tokens − random)",
         "forking tokens: “utilizing only 20% of the tokens while maintaining performance "
         "comparable to full-gradient updates” (arXiv 2506.01939 v1 abstract); against: random "
         "20 % subsets recover most of full-token training (arXiv 2605.07660 abstract)",
         v_fork, not_real, n_fork, COMMAND],
        ["GTPO's token credit drives learning (GTPO − GRPO, and its share of the ceiling)",
         "GTPO “synthesizes token-specific advantage function to drive the model toward "
         "optimal path” (v6 abstract)", v_gtpo, not_real, n_gtpo, COMMAND],
    ]  # fmt: skip
