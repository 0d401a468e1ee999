"""The HF path by hand: generate → rollout_batch → advantages → loss → optimizer step, no TRL.

The loop a reader copies into their own code is ``refimpl/scaleup/hf_by_hand.py`` (``loop.py``'s
twin on a Hugging Face model); this script runs it on SmolLM2-135M-Instruct, two-digit
additions in a chat, free-form rewards, any ``refimpl.algorithms`` name. Held-out success
before and after, as ``run_trl.py`` beside it reports it (the same defaults, the same table).

    python scripts/experiments/real_model/run_hf_loop.py --algorithm gtpo --out hf_loop.json
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from refimpl import algorithms  # noqa: E402
from refimpl.scaleup.hf_by_hand import train_hf_loop  # noqa: E402
from refimpl.scaleup.models import load_smollm2  # noqa: E402
from refimpl.scaleup.real_task import ChatTask  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    import argparse
    from pathlib import Path

    from refimpl.scaleup.real_task import before_after_table, evaluate, summarise_steps

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithm", default="gtpo", choices=algorithms.NAMES)
    p.add_argument("--rollouts", type=int, default=6)
    p.add_argument("--prompts-per-step", type=int, default=8, help="N, problems per rollout")
    p.add_argument("--group-size", type=int, default=8, help="G, replies per problem")
    p.add_argument("--minibatches", type=int, default=4, help="optimizer steps per rollout")
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--learning-rate", type=float, default=2e-5)
    p.add_argument("--eval-problems", type=int, default=100)
    p.add_argument("--eval-samples", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    task, (model, tok) = ChatTask(), load_smollm2()
    held_out = task.held_out(args.eval_problems)
    problems = task.training(args.prompts_per_step * args.rollouts, args.seed, args.eval_problems)

    def run_eval() -> dict:
        e = evaluate(model, tok, task, held_out, n_samples=args.eval_samples,
                     max_new_tokens=args.max_new_tokens, seed=args.seed)  # fmt: skip
        return {**e.row(), "examples": e.examples}

    base = run_eval()
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    log = train_hf_loop(model, tok, task, problems, args.algorithm, args.prompts_per_step,
                        args.group_size, args.rollouts, args.minibatches, args.max_new_tokens,
                        args.learning_rate, progress=True)  # fmt: skip
    run = {"algorithm": f"{args.algorithm} (HF loop)", "train_s": time.perf_counter() - t0,
           "train": summarise_steps(log), "steps": log, "after": run_eval()}  # fmt: skip
    from refimpl.bench import machine_info
    from refimpl.runs import cpu_kernels

    # The machine that computed the file: its CPU model, cores, versions, numeric path.
    machine = {**machine_info(), "numerics": cpu_kernels.describe()}
    result = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": machine,
        "base": base,
        "runs": [run],
    }
    print(table := before_after_table(base, [run]))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(table)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
