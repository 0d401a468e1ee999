"""The TRL path on a laptop CPU, offline, in about a minute: a tiny model learns through TRL's
GRPOTrainer with this repository's advantages and loss.

    .venv/bin/python examples/trl_tiny.py                       # GRPO, 16 optimizer steps
    .venv/bin/python examples/trl_tiny.py --algorithm gtpo --rollouts 4

1. The base model: the toy GPT (1 layer, d = 32) warm-started on one-operation chains
   (``refimpl.warmstart``, cached under ``--runs-dir``), which solves about half of them, so
   a group of completions holds right and wrong answers and the algorithm has a gradient.
2. Its twin in transformers (``refimpl.scaleup.hf.to_hf_gpt2``: a ``GPT2LMHeadModel`` with
   the same weights and logits) and the toy character tokenizer as a transformers tokenizer
   (``char_tokenizer``): nothing is downloaded.
3. ``RefimplGRPOTrainer``, TRL's ``GRPOTrainer`` with our ``advantages`` and ``loss``, on
   chain problems scored by the task's own verifier (``reward``: 1 for a right answer).
4. Greedy success on held-out problems before and after, from the trained weights copied back
   into the toy model (``from_hf_gpt2``).

Each optimizer step prints its loss, its rollout's reward and its entropy, or says plainly
that it trained on nothing (every advantage of its micro-batch was 0); every step is checked,
not only the step that generated the rollout. The warm start reports its success on its own
20 check problems; the held-out figure before and after is on other problems.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--algorithm", default="grpo", help="any name of `refimpl algos`")
    parser.add_argument("--rollouts", type=int, default=4, help="generation rounds")
    parser.add_argument("--prompts-per-step", type=int, default=8, help="N, problems per rollout")
    parser.add_argument("--group-size", type=int, default=8, help="G, completions per problem")
    parser.add_argument(
        "--minibatches", type=int, default=4, help="optimizer steps per rollout (micro-batches)"
    )
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--eval-problems", type=int, default=200, help="held-out problems")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="where the warm start is cached"
    )
    return parser.parse_args(argv)


def check_args(args: argparse.Namespace) -> None:
    """Every flag, checked before anything is trained or written."""
    from refimpl import algorithms
    from refimpl.contract import require

    require(args.algorithm in algorithms.NAMES, "--algorithm", f"one of {algorithms.NAMES}")
    for flag in ("rollouts", "prompts_per_step", "group_size", "minibatches"):
        require(getattr(args, flag) >= 1, f"--{flag.replace('_', '-')}", "at least 1")
    require(args.group_size >= 2, "--group-size", "at least 2 (a group needs a baseline)")
    completions = args.prompts_per_step * args.group_size
    require(completions % args.minibatches == 0, "--minibatches", f"a divisor of {completions}")
    require(args.eval_problems >= 0, "--eval-problems", "at least 0")


def same_length_problems(task, args: argparse.Namespace) -> list:
    """The training problems, all with prompts of one length: TRL left-pads a batch of prompts,
    and GPT-2's learned positions would then shift with the padding (the toy model was trained
    without it)."""
    pool = task.sample(20 * args.prompts_per_step * args.rollouts, args.seed)
    length = max({len(p.prompt) for p in pool}, key=[len(p.prompt) for p in pool].count)
    return [p for p in pool if len(p.prompt) == length][: args.prompts_per_step * args.rollouts]


def print_success(n: int, before: float, after: float) -> None:
    print(
        f"held-out greedy success on {n} problems (other problems than the warm start's own "
        f"check above, the same {n} before and after): {before:.3f} → {after:.3f} "
        f"({after - before:+.3f}; one seed and a few steps: a change this size is noise, "
        "not a result)"
    )


def main(argv: list[str] | None = None) -> dict:
    """Train; return ``{"before", "after", "steps", "weight_change"}``: held-out success
    before and after, TRL's log of each optimizer step, and the largest change of a weight."""
    args = parse_args(argv)
    import tempfile

    import torch
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback

    import toy_envs
    from refimpl.evaluate import success_rate
    from refimpl.scaleup.hf import char_tokenizer, from_hf_gpt2, to_hf_gpt2
    from refimpl.scaleup.real_task import TRL_FIXED_ARGS, StepPrinter
    from refimpl.scaleup.trl import GRPOConfig, RefimplGRPOTrainer
    from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig
    from refimpl.warmstart import train_warmstart

    check_args(args)  # every flag, before anything is trained or written
    completions = args.prompts_per_step * args.group_size

    torch.manual_seed(args.seed)
    task = toy_envs.get_task("chain", num_ops=1)
    base = train_warmstart(
        WarmstartConfig(
            task="chain", task_args=("num_ops=1",), steps=200, batch_size=64, lr=3e-3,
            runs_dir=args.runs_dir, eval_problems=20, progress=False,
            model=ModelSize(n_layer=1, n_embd=32, n_head=2),
        )
    )  # fmt: skip
    held_out = task.sample(args.eval_problems, 10_000 + args.seed) if args.eval_problems else []
    max_new = task.max_new_tokens

    def success(gpt) -> float | None:
        return success_rate(gpt, task, held_out, greedy=True) if held_out else None

    before = success(base)
    problems = same_length_problems(task, args)
    dataset = Dataset.from_list([{"prompt": p.prompt, "index": i} for i, p in enumerate(problems)])

    def reward(completions: list[str], index: list[int], **_: object) -> list[float]:
        return [task.reward(problems[i], c) for i, c in zip(index, completions, strict=True)]

    model = to_hf_gpt2(base)
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    tokenizer = char_tokenizer(toy_envs.TOKENIZER)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = RefimplGRPOTrainer(
            model=model,
            reward_funcs=reward,
            train_dataset=dataset,
            processing_class=tokenizer,
            algorithm=args.algorithm,
            args=GRPOConfig(
                output_dir=tmp,
                per_device_train_batch_size=completions // args.minibatches,
                steps_per_generation=args.minibatches,
                num_generations=args.group_size,
                max_completion_length=max_new,
                max_steps=args.rollouts * args.minibatches,
                learning_rate=args.learning_rate,
                seed=args.seed,
                **TRL_FIXED_ARGS,
                use_cpu=True,
            ),
        )
        trainer.remove_callback(PrinterCallback)  # disable_tqdm prints every log dict
        trainer.add_callback(StepPrinter())
        trainer.train()
    after = success(from_hf_gpt2(model))
    steps = [h for h in trainer.state.log_history if "loss" in h]
    print(f"trained {len(steps)} optimizer steps through TRL in {time.perf_counter() - t0:.0f} s")
    if held_out:
        print_success(len(held_out), before, after)
    change = max(float((v - start[k]).abs().max()) for k, v in model.state_dict().items())
    return {"before": before, "after": after, "steps": steps, "weight_change": change}


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except ValueError as err:  # a bad flag: one line, exit 2, nothing trained
        print(f"trl_tiny.py: error: {err}", file=sys.stderr)
        sys.exit(2)
