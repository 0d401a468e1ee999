"""Every run docs/claims.md reads, as a declaration that ``scripts/experiments/run_experiment.py``
runs (a result file that exists is skipped, so the study can be stopped and started again):

    python scripts/experiments/run_experiment.py scripts/experiments/claims/claims_study.py --dry-run

* the toy: the collapse benchmark (five arms and four ablations, 5 seeds);
* the real model (SmolLM2-135M via TRL, ``run_real.py`` beside this file, one file per arm and
  seed, about 6-7.5 minutes a run): the first pass (2026-12-03, a 2-core Intel Xeon), the
  second (2026-12-04, a 2-core AMD EPYC: DAPO without overlong shaping, then seeds 3-7,
  evaluated after the last step only; the evaluations run under a forked random-number
  generator, so fewer of them do not change what an arm trains), the third (2026-12-06, the
  EPYC: the seeds that can decide the α₂ row, 18 for an MDD near 0.05, then GRPO-S on seeds
  3-5 so that GRPO-S − DAPO without overlong shaping pairs on one machine), and two first-pass
  files rerun on the EPYC (``cross_machine``);
* more seeds of the long-chain row (GRPO-S, DAPO, GRPO on seeds 5-10; with the credit study's
  0-4 the row has 11), one benchmark per seed, in the credit study's regime.
"""

REAL = "python scripts/experiments/claims/run_real.py --arm {arm} --seed {seed}"
LATE = "--eval-at 12"  # the second and third passes: one evaluation, after the last step


def _arms(seeds, *names, flags=""):
    return {name: {"seeds": list(seeds), "flags": flags} for name in names}


DECLARATION = {
    "results": "scripts/experiments/claims/results",
    "kind": "claims",
    "page": "python scripts/experiments/claims/claims_page.py",
    "experiment": [
        {"name": "toy", "result": "toy/results.json", "bench": "{runs}/claims/toy5",
         "run": "refimpl bench-learning --preset collapse --algos grpo,dapo,gtpo,grpo_s,tepo "
                "--seeds {seeds} --ablations 'gtpo alpha_2=0.0,gtpo stats=batch,tepo "
                "kl_mask=False,dapo overlong_shaping=False' --ablation-tasks countdown "
                "--eval-every 50 --out {bench} --workers 1 --lr-warmup 0",
         "seeds": [0, 1, 2, 3, 4], "copy": "{bench}/results.json"},
        {"name": "real pass 1", "result": "real/{arm}_seed{seed}.json",
         "run": REAL + " --out-dir {out}/real",
         "arms": {**_arms(range(3), "base", "dapo", "gtpo", "grpo_s", "tepo", "grpo", "gtpo_alpha0",
                          "tepo_nomask", "dapo_noshape"), **_arms([0], "gtpo_batch")}},
        {"name": "real pass 2", "result": "real/{arm}_seed{seed}.json",
         "run": REAL + " --out-dir {out}/real",
         "arms": {**_arms(range(3, 8), "base"),
                  **_arms(range(3, 6), "dapo", "dapo_noshape", flags=LATE),  # 6-7: not run
                  **_arms(range(3, 8), "gtpo", "gtpo_alpha0", flags=LATE)}},
        {"name": "real pass 3", "result": "real/{arm}_seed{seed}.json",
         "run": REAL + " --out-dir {out}/real",
         "arms": {**_arms(range(8, 18), "base"), **_arms(range(8, 18), "gtpo", "gtpo_alpha0", flags=LATE),
                  **_arms(range(3, 6), "grpo_s", flags=LATE)}},
        {"name": "cross machine", "result": "real/cross_machine/{arm}_seed{seed}_epyc.json",
         "run": REAL + " --out-dir {runs}/claims/cross_machine",
         "copy": "{runs}/claims/cross_machine/{arm}_seed{seed}.json",
         "arms": _arms([0], "base", "dapo")},
        {"name": "long chain", "result": "long_chain/seed{seed}.json",
         "bench": "{runs}/claims/longchain/s{seed}",
         "run": "refimpl bench-learning --preset longchain --algos grpo,dapo,grpo_s --ablations '' "
                "--seeds {seeds} --runs-dir {runs} --out {bench} --workers 1 --lr-warmup 0",
         "seeds": [5, 6, 7, 8, 9, 10], "copy": "{bench}/results.json"},
    ],
}  # fmt: skip
