"""The ceiling of token credit (docs/credit.md, "What credit is worth"): every result file the
section reads, as a declaration that ``scripts/experiments/run_experiment.py`` runs.

    python scripts/experiments/run_experiment.py scripts/experiments/ceiling/ceiling_study.py --dry-run

The regime is the long chain's (``--preset longchain``: chain with 10-12 operators, the preset's
warm start, 64 prompts × G = 8 per step, 4 minibatches, lr 1e-4) at a budget of 20 GRPO-sized
steps of sampled tokens (the learning benchmark's is 100: VinePPO's values cost about 26 times
the policy's tokens per step, docs/credit.md has the costs), evaluated on 300 held-out problems
(16 samples each for pass@k) every 5 steps. ``collect.py`` gathers each benchmark's runs into
its result file. Costs on the 2-core AMD EPYC: docs/credit.md ("What VinePPO pays").
"""

BENCH = "refimpl bench-learning --preset longchain --runs-dir {runs} --out {bench} --seeds {seeds} --workers {workers}"
COLLECT = "python scripts/experiments/ceiling/collect.py --bench {bench}"
CREDIT = "refimpl credit --preset longchain --prompts 16 --rollouts 64 --threads 1 --out {result}"
TWO = "--lr-warmup 0 --algos vineppo,grpo --ablations ''"

DECLARATION = {
    "results": "scripts/experiments/ceiling/results",
    "kind": "ceiling",
    "page": "python scripts/experiments/ceiling/ceiling_page.py",
    "page_check": "python scripts/experiments/ceiling/ceiling_page.py --results {out} --check --no-figure",
    "defaults": {"run": BENCH, "budget": "--budget-steps 20", "grid": "--eval-every 5 --eval-problems 300"},
    "experiment": [
        # 1. The ceiling (VinePPO against GRPO, and GRPO without its KL term) on 5 paired seeds,
        # 2. then every other arm on the first 3 (what the session that made the files afforded).
        {"name": "runs", "result": "runs.json", "bench": "{runs}/bench/ceiling",
         "arms": {
             "ceiling": {"seeds": [0, 1, 2, 3, 4], "flags": "--ablation-tasks chain --lr-warmup 0 "
                         "--algos vineppo,grpo --ablations 'grpo kl_coef=0.0'"},
             "other arms": {"seeds": [0, 1, 2], "flags": "--ablation-tasks chain --lr-warmup 0 "
                            "--algos grpo,dapo,gtpo,grpo_s,tepo,forking_tokens,steer "
                            "--ablations 'gtpo alpha_2=0.0,forking_tokens selection=random'"}},
         "then": [COLLECT + " --out {result}"]},
        # Every arm's credit agreement on one warm-start batch (16 prompts × G = 8, K = 64): the
        # scatter's x axis; an arm with a Config override is scored on the same batch alone.
        {"name": "credit", "result": "credit_warmstart.json", "run": CREDIT, "budget": "",
         "grid": "", "seeds": [0]},
        {"name": "credit forking random", "result": "credit_forking_random.json", "run": CREDIT,
         "budget": "", "grid": "", "seeds": [0], "arms": {"forking_tokens selection=random": {
             "flags": "--algos forking_tokens --train.algo forking_tokens "
                      "--train.algo-args selection=random"}}},
        {"name": "credit gtpo alpha_2=0", "result": "credit_gtpo_alpha2_0.json", "run": CREDIT,
         "budget": "", "grid": "", "seeds": [0], "arms": {"gtpo alpha_2=0.0": {
             "flags": "--algos gtpo --train.algo gtpo --train.algo-args alpha_2=0.0"}}},
        # 3. A probe: the ceiling at lr 3e-4 (where GRPO fell in the regime probes), 3 seeds.
        {"name": "probe lr3e-4", "result": "probe_lr3e-4.json",
         "bench": "{runs}/bench/ceiling-probe-lr3e-4",
         "arms": {"ceiling": {"seeds": [0, 1, 2], "flags": TWO + " --lr 0.0003"}},
         "then": [COLLECT + " --probe lr=3e-4 --out {result}"]},
        # 4. Countdown (--preset collapse) on 20 seeds (0-4 first, then 5-19 when 5 left H at
        #    1.1 times its MDD).
        {"name": "countdown", "result": "countdown.json", "bench": "{runs}/bench/ceiling-countdown",
         "run": BENCH.replace("longchain", "collapse"),
         "arms": {"ceiling": {"seeds": list(range(20)), "flags": TWO}},
         "then": [COLLECT + " --probe countdown --out {result}"]},
        # 5. The sample-matched arm: GRPO with G = 64 for the same 20 updates (by steps, through
        #    `refimpl compare`: a token budget would stop it after 3), 2 seeds.
        {"name": "sample matched", "result": "sample_matched.json",
         "bench": "{runs}/ceiling-matched-G64",
         "run": "refimpl compare --preset longchain --train.lr-warmup 0 --algos grpo --seeds {seeds} "
                "--name ceiling-matched-G64 --runs-dir {runs} --workers {workers}",
         "budget": "--train.group-size 64 --train.steps 20",
         "grid": "--train.eval-every 5 --train.eval-problems 300 --train.probe-every 5",
         "arms": {"grpo G=64": {"seeds": [0, 1], "flags": "--train.threads 1 --train.no-plot"}},
         "then": [COLLECT + " --probe 'GRPO G=64' --out {result}"]},
        # 7. The ceiling with the learning-rate warm-up (--lr-warmup 8; docs/first_update.md) on
        #    the 5 seeds: VinePPO as above, VinePPO as its authors run it where this testbed
        #    allows (advantages whitened, 2 epochs, T = 0.6, top-p 0.9), and GRPO.
        {"name": "warmup", "result": "warmup.json", "bench": "{runs}/bench/ceiling-warmup",
         "arms": {"ceiling": {"seeds": [0, 1, 2, 3, 4], "flags": "--lr-warmup 8 --algos vineppo,grpo "
                  "--ablations 'vineppo whiten_advantages=True ppo_epochs=2 temperature=0.6 top_p=0.9'"}},
         "then": [COLLECT + " --probe lr_warmup=8 --out {result}"]},
        # 8. The lr probe with the warm-up: 3e-4 on 3 seeds (1e-3 is not run: the warm-up does
        #    not tame its first step, docs/first_update.md).
        {"name": "warmup lr3e-4", "result": "warmup_lr3e-4.json",
         "bench": "{runs}/bench/ceiling-warmup-lr3e-4",
         "arms": {"ceiling": {"seeds": [0, 1, 2],
                              "flags": "--lr-warmup 8 --lr 3e-4 --algos vineppo,grpo --ablations ''"}},
         "then": [COLLECT + " --probe 'lr=3e-4 lr_warmup=8' --out {result}"]},
    ],
}  # fmt: skip
