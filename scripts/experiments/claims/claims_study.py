"""Every run docs/claims.md reads, as a declaration that ``scripts/experiments/run_experiment.py``
runs (a result file that exists is skipped, so the study can be stopped and started again):

    python scripts/experiments/run_experiment.py scripts/experiments/claims/claims_study.py --dry-run

* the toy: the collapse benchmark (five arms and four ablations, 5 seeds);
* the real model (SmolLM2-135M via TRL, ``run_real.py`` beside this file, one file per arm and
  seed, about 6-7.5 minutes a run), in the passes that ran it, as the files' commits show
  (``git log --follow`` on ``results/real/``): the first pass (2026-12-03, a 2-core Intel
  Xeon: every arm on seeds 0-2); the second (2026-12-04 and 05, a 2-core AMD EPYC: DAPO
  without overlong shaping on seeds 0-2, then seeds 3-5 of the base model, both DAPO arms,
  GTPO and GTPO with α₂ = 0, evaluated after the last step only; the evaluations run under a
  forked random-number generator, so fewer of them do not change what an arm trains; it was
  planned to seed 7 and stopped at 5); the third (2026-12-06, the EPYC: seeds 6-17 of the
  base model, GTPO and GTPO with α₂ = 0, the seeds that can decide the α₂ row, 18 for an MDD
  near 0.05, then GRPO-S on seeds 3-5 so that GRPO-S − DAPO without overlong shaping pairs
  on one machine); and two first-pass files rerun on the EPYC (``cross_machine``);
* more seeds of the long-chain row (GRPO-S, DAPO, GRPO on seeds 5-10; with the credit study's
  0-4 the row has 11), one benchmark per seed, in the credit study's regime.

**Looks.** A pass read on the pages before the next pass was planned is a *look*: it could
have ended the study with a verdict, so the pages test a comparison read at L looks at
α / L (``refimpl.bench.stats``, Bonferroni over looks). Each pass was read before the next
was planned (the first on 2026-12-03; the second on 2026-12-05, 8e9704d; the third's seeds
6-17 were planned on 2026-12-06, cc8a9de, and run to that plan). A comparison's looks are
the passes, in order, after which the seeds both its arms have grew (``real_runs.looks``,
which reads the ``real pass N`` entries below; both entries of the second pass are one
pass): GTPO − GTPO with α₂ = 0 has 3 (seeds 0-2, 0-5, 0-17), GTPO − DAPO and GRPO-S − DAPO
have 2, a pair within one pass has 1. The pairs are counted whatever machine each run used,
as the pages paired them when the first two passes were read (one machine per pair since
2026-12-06): GRPO-S − DAPO without overlong shaping was read on seeds 0-2 after the second
pass, so its seeds 3-5 are its second look. The seeds committed one by one within a pass
are not looks: each pass ran to the size planned before it began (the second stopped short
of it, after a read: that read is its look). The toy file is one look: the 5-seed file of
2026-12-06 replaced, not extended, the 3-seed one (new runs from the shipped base model).
"""

REAL = "python scripts/experiments/claims/run_real.py --arm {arm} --seed {seed}"
LATE = "--eval-at 12"  # the second and third passes: one evaluation, after the last step

#: Looks taken before this declaration's passes, in another one: the long-chain row read the
#: credit study's seeds 0-4 (scripts/experiments/credit/credit_study.py; in the ledger since
#: 2026-12-05, 8e9704d) before its seeds 5-10 were planned here (2026-12-06, eb4911c) and run
#: to that plan, so the row has 2 looks (``long_chain_rows.looks``). Each earlier look: the
#: seeds it read.
EARLIER_LOOKS = {"long chain": [[0, 1, 2, 3, 4]]}


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
                          "tepo_nomask"), **_arms([0], "gtpo_batch")}},
        {"name": "real pass 2", "result": "real/{arm}_seed{seed}.json",  # 2026-12-04
         "run": REAL + " --out-dir {out}/real", "arms": _arms(range(3), "dapo_noshape")},
        {"name": "real pass 2, seeds 3-5", "result": "real/{arm}_seed{seed}.json",
         "run": REAL + " --out-dir {out}/real",
         "arms": {**_arms(range(3, 6), "base"),  # planned to seed 7, stopped at 5
                  **_arms(range(3, 6), "dapo", "dapo_noshape", "gtpo", "gtpo_alpha0", flags=LATE)}},
        {"name": "real pass 3", "result": "real/{arm}_seed{seed}.json",
         "run": REAL + " --out-dir {out}/real",
         "arms": {**_arms(range(6, 18), "base"), **_arms(range(6, 18), "gtpo", "gtpo_alpha0", flags=LATE),
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
