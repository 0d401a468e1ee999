"""Every result file docs/credit.md reads, as a declaration that
``scripts/experiments/run_experiment.py`` runs (a result file that exists is skipped, so the
study can be stopped and started again; the page is written after):

    python scripts/experiments/run_experiment.py scripts/experiments/credit/credit_study.py --dry-run

1. Two tasks, three batches each (16 prompts × G = 8, the oracle at K = 16, 32 and 64): the
   long chain (``--preset longchain``: chain with 10-12 operators) at its warm start and after
   40 and 100 GRPO steps of one run (``refimpl compare``, resumed); countdown (``--preset
   collapse``) at its warm start and after 50 and 200 GRPO steps. Then the preset's warm start
   as its cache recorded it, and the oracle's cost (8 prompts at K = 32 on 2 threads: time it
   on an otherwise idle machine).
2. How the regime was chosen: GRPO, seed 0, one setting changed at a time (16 prompts for 150
   steps, lr 3e-4 and 1e-3 for 50, the preset's 64 prompts for 100), gathered by
   ``regime_probes.py``.
3. The long-chain learning benchmark: the preset's arms × 5 paired seeds at one budget.
4. The real model (SmolLM2-135M, untrained): 2 problems × 8 replies at K = 8 and at K = 32 (the
   oracle's noise at K = 8 is as large as A*), and 16 problems at K = 32 (the claims ledger
   takes the prompt as the unit; about 7 minutes of oracle on one thread).

``calibrate.py`` (the warm start's calibration, about 1.5 h) is run on its own. Costs on the
2-core AMD EPYC of 2026-12-04, next to other jobs: docs/credit.md.
"""

CREDIT = "refimpl credit --prompts 16 --rollouts 16,32,64 --threads 1 --out {result}"
COMPARE = (
    "refimpl compare --algos grpo --seeds 0 --runs-dir {runs} --workers 1 --train.threads 1 "
    "--train.lr-warmup 0 --train.no-plot --train.resume"
)  # resume: on from the last batch
REAL = "python scripts/experiments/credit/real_model.py --out {result}"
PROBES = {"n16": "--train.prompts-per-step 16 --train.steps 150 --train.eval-every 25",
          "lr3e-4": "--train.lr 3e-4 --train.steps 50 --train.eval-every 25",
          "lr1e-3": "--train.lr 1e-3 --train.steps 50 --train.eval-every 25",
          "n64": "--train.steps 100"}  # fmt: skip


def _batches(task: str, preset: str, steps: tuple[int, int]) -> list[dict]:
    """The warm start's batch, then one GRPO run trained (on) to each of ``steps``."""
    run = f"{{runs}}/credit-{task}/grpo-s0"
    return [{"name": f"{task} step0", "result": f"{task}_step0.json",
             "run": f"{CREDIT} --preset {preset} --train.runs-dir {{runs}}"}] + [
        {"name": f"{task} step{n}", "result": f"{task}_step{n}.json", "budget": f"--train.steps {n}",
         "run": f"{COMPARE} --preset {preset} --name credit-{task}", "then": [f"{CREDIT} --run {run}"]}
        for n in steps]  # fmt: skip


DECLARATION = {
    "results": "scripts/experiments/credit/results",
    "kind": "credit",
    "page": "python scripts/experiments/credit/credit_page.py",
    "page_check": "python scripts/experiments/credit/credit_page.py --results {out} --check --no-figure",
    "defaults": {"seeds": [0]},
    "experiment": [
        *_batches("longchain", "longchain", (40, 100)),
        *_batches("countdown", "collapse", (50, 200)),
        {"name": "warm start", "result": "warmstart_longchain.json",
         "copy": "{runs}/warmstart/chain-*/state.json", "copy_if": '"min_ops=10"'},
        {"name": "cost", "result": "cost_longchain.json",
         "run": "refimpl credit --preset longchain --train.runs-dir {runs} --prompts 8 --rollouts 32 "
                "--threads 2 --out {result}"},
        {"name": "regime probes", "result": "regime_probes.json",
         "run": COMPARE + " --preset longchain --name probe-{arm}",
         "arms": {name: {"flags": flags} for name, flags in PROBES.items()},
         "then": ["python scripts/experiments/credit/regime_probes.py --runs {runs} --out {result} "
                  + " ".join(PROBES)]},
        {"name": "learning", "result": "longchain_learning.json", "bench": "{runs}/bench/longchain",
         "run": "refimpl bench-learning --preset longchain --runs-dir {runs} --out {bench} "
                "--seeds {seeds} --lr-warmup 0 --workers {workers}",
         "seeds": [0, 1, 2, 3, 4], "copy": "{bench}/results.json"},
        {"name": "real", "result": "real_smollm2.json", "run": REAL},
        {"name": "real K=32", "result": "real_smollm2_k32.json", "run": REAL + " --rollouts 32"},
        {"name": "real 16 prompts", "result": "real_smollm2_p16_k32.json",
         "run": REAL + " --prompts 16 --rollouts 32"},
    ],
}  # fmt: skip
