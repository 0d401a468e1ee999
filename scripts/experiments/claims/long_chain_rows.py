"""The ledger's two rows on GRPO-S and long chains of thought: the papers' scale (not
testable here), and what was run, GRPO-S against DAPO and GRPO on the toy's long-chain preset,
every arm read on one grid of sampled tokens.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from arms import NAMES
from claims_results import read_file
from credit_rows import CREDIT, CREDIT_CMD
from learning_curves import worst_drop
from real_runs import final
from wording import both, describe

from refimpl.bench.stats import Comparison, common_grid, on_grid, over_seeds

#: More seeds of the arms the long-chain row reads (GRPO-S, DAPO, GRPO), one file per seed
#: (``claims_study.py``'s long chain), beside the credit study's 5-seed file.
MORE_SEEDS = Path(__file__).resolve().parent / "results" / "long_chain"


def looks(seeds) -> int:
    """How often the row was read before it stopped: the looks ``claims_study.py`` records
    before its own passes (the credit study's seeds 0–4), then its ``long chain`` passes,
    each counted where it holds one of ``seeds`` (the seeds the row pairs)."""
    import runpy

    from real_runs import STUDY

    study = runpy.run_path(str(STUDY))
    reads = [*study["EARLIER_LOOKS"]["long chain"],
             *(e["seeds"] for e in study["DECLARATION"]["experiment"] if e["name"] == "long chain")]  # fmt: skip
    return max(1, sum(bool({int(s) for s in seeds} & set(read)) for read in reads))


def long_chain_runs() -> dict | None:
    """Per arm, per seed, the long-chain runs: the credit study's file (seeds 0–4), and the
    seeds of ``MORE_SEEDS`` whose file ran on the same CPU from the same warm start (the same
    held-out base success), so that every pair of the row runs on one machine from one model.
    A seed the first file has already is never replaced."""
    from refimpl.bench.result_header import expect

    path = CREDIT / "longchain_learning.json"
    first = read_file(path)
    results = first["results"]
    expect(isinstance(results, dict) and results, path, "results: expected a task's results")
    task = next(iter(results.values()))
    runs = {arm: dict(per_seed) for arm, per_seed in task["runs"].items()}
    for more in sorted(MORE_SEEDS.glob("seed*.json")):
        data = read_file(more)
        extra = next(iter(data["results"].values()))
        same = (data["machine"].get("cpu") == first["machine"].get("cpu")
                and extra["base"] == task["base"])  # fmt: skip
        expect(same, more, f"a run on {first['machine'].get('cpu')} from the warm start at "
                           f"{task['base']} (the first file's), to pair with its seeds")  # fmt: skip
        for arm, per_seed in extra["runs"].items():
            for seed, run in per_seed.items():
                runs.setdefault(arm, {}).setdefault(seed, run)
    return runs


LONG_COT_QUOTE = ("“exhibits superior stability in long Chain-of-Thought (CoT) reasoning tasks” "
                  "(v6 abstract); “GRPO-S exhibits higher stability across settings” (v5 §3.4)")  # fmt: skip

LONG_COT_CMD = ("`refimpl bench-learning --preset longchain` (" + CREDIT_CMD + "); more seeds "
                "of GRPO-S, DAPO and GRPO: `python scripts/experiments/run_experiment.py scripts/experiments/claims/claims_study.py --only 'long chain'`")  # fmt: skip


def long_cot_compare(
    runs: dict, arm: str, base: str, grid: np.ndarray
) -> tuple[Comparison, Comparison]:
    """``arm`` − ``base`` per paired seed on the common ``grid``: (the worst fall between two
    consecutive grid points, the success at the grid's last point), corrected for the row's
    ``looks``."""
    seeds = [s for s in runs[arm] if s in runs.get(base, {})]
    a = {s: on_grid(runs[arm][s], grid) for s in seeds}
    b = {s: on_grid(runs[base][s], grid) for s in seeds}
    n = looks(seeds)
    fall = over_seeds({int(s): worst_drop(a[s]) - worst_drop(b[s]) for s in seeds}, looks=n)
    end = over_seeds({int(s): float(a[s][-1] - b[s][-1]) for s in seeds}, looks=n)
    return fall, end


def long_chain_setting() -> tuple[str, float]:
    """("23–37-token chains of a 2-layer model", the learning rate) from the files: the
    warm start's sampled completions (the credit batch at step 0) and its recorded model, and
    the preset's learning rate (chosen with GRPO: results/regime_probes.json)."""
    from refimpl.bench.learning_settings import LearningConfig

    batch = read_file(CREDIT / "longchain_step0.json")["completions"]
    lengths = [len(c["token"]) for c in batch]
    layers = read_file(CREDIT / "warmstart_longchain.json")["config"]["model"]["n_layer"]
    lr = LearningConfig(preset="longchain").with_preset(frozenset()).train_defaults().lr
    return f"{min(lengths)}–{max(lengths)}-token chains of a {layers}-layer model", float(lr)


def row_long_cot_papers(real, toy):
    """The paper's claim at its own scale: nothing here is a long chain of thought."""
    lengths = [final(v)["mean_tokens"] for v in real.values()]
    what, _ = long_chain_setting()
    return ["GRPO-S is more stable on long chains of thought (the papers' scale)", LONG_COT_QUOTE,
            "not testable here", "not testable here",
            f"the papers' long chains of thought are those of 7B–32B models on math benchmarks; "
            f"here the longest are the toy's {what} and the real model's replies are "
            f"{min(lengths):.1f}–{max(lengths):.1f} tokens (no chain of thought); the next row "
            "is what was run", "—"]  # fmt: skip


def row_long_cot(real, toy):
    runs = long_chain_runs()
    what, lr = long_chain_setting()
    claim = (f"GRPO-S falls less than DAPO and GRPO on {what}, at GRPO's learning rate "
             f"({lr:g}), every arm read on one grid of sampled tokens")  # fmt: skip
    if runs is None or "grpo_s" not in runs:
        return [claim, LONG_COT_QUOTE, "not measured", "not run", "", LONG_COT_CMD]
    arms = [a for a in ("grpo_s", "dapo", "grpo") if a in runs]
    grid = common_grid([r for a in arms for r in runs[a].values()])
    evals = {a: sorted({len(r["curve_tokens"]) - 1 for r in runs[a].values()}) for a in arms}
    kept = [r["kept_group_frac"] for r in runs["grpo_s"].values()]
    verdicts, numbers = [], []
    for base in ("dapo", "grpo"):
        fall, end = long_cot_compare(runs, "grpo_s", base, grid)
        verdicts.append(fall.verdict(-1))
        numbers += [describe(fall, f"worst fall of held-out success on the grid GRPO-S − {NAMES[base]}"),
                    describe(end, f"success at the grid's end GRPO-S − {NAMES[base]}")]  # fmt: skip
    how = (f"the grid: {', '.join(f'{t / 1e3:.0f}k' for t in grid)} sampled tokens (0 to the "
           f"earliest last evaluation of any run, in as many steps as the fewest evaluations "
           f"any run has), each arm read there linearly in sampled tokens between its own "
           f"evaluations; evaluations per run after the start: "
           + ", ".join(f"{NAMES[a]} {'/'.join(map(str, n))}" for a, n in evals.items())
           + f" (GRPO-S keeps {100 * min(kept):.0f}–{100 * max(kept):.0f} % of its groups and "
           "resamples, so one token budget holds fewer of its steps and evaluations)")  # fmt: skip
    return [claim, LONG_COT_QUOTE, both(*verdicts), "not run (no real-model chain)",
            "; ".join([how, *numbers]), LONG_COT_CMD]  # fmt: skip
