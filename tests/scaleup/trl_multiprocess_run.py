"""One optimizer step of ``RefimplGRPOTrainer`` per algorithm, in one or in several processes.

Started by ``tests/scaleup/test_trl_multiprocess.py`` on the same global batch of 3 groups ×
G = 4 completions, once in one process and once in two::

    python tests/scaleup/trl_multiprocess_run.py OUT/one MODEL "12x1:grpo,dapo"
    accelerate launch --multi_gpu --num_processes 2 tests/scaleup/trl_multiprocess_run.py \
        OUT/two MODEL "6x1:grpo,dapo;3x2:dapo"

(``<per_device_train_batch_size>x<gradient_accumulation_steps>:<algorithms>``; accelerate's
``--multi_gpu`` is its torchrun launcher: the processes find no GPU and run as MULTI_CPU with
gloo, while ``--cpu`` with several processes would need MPI). With 2 processes × 6 rows,
process 0 holds rows 0-5 and process 1 rows 6-11, so group 1 (rows 4-7) spans both; ``3x2``
adds two accumulated micro-batches of 3 rows per process.

Generation is TRL's ``rollout_func`` seam with completions fixed per *global* row (not
sampled), so both runs see the same completions and rewards however the rows are split.
Everything else is TRL's and ours: reward gathering, our advantages over the gathered batch,
the slice back to each process, the per-process loss rescaling, DDP's gradient averaging
(gloo) and a plain SGD step (no momentum, no clipping: the update is −lr·gradient, so a wrong
loss scale shows in the weights; Adam's first step would hide it).

Rank 0 writes ``OUT/<algorithm>.pt``: the gathered advantages, loss mask, prompt and
completion ids, the updated weights and TRL's logged metrics.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

import toy_envs
from refimpl import algorithms
from refimpl.scaleup.trl import GRPOConfig, RefimplGRPOTrainer

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL

ALGORITHMS = ("grpo", "dapo", "gpg", "gtpo", "tepo")
G = 4
MAX_NEW = 6
ROWS = 12
LR = 0.5
#: Completion length of each global row (group = row // G). Group 0 and the split group 1 mix
#: even and odd lengths (reward 1 / 0); group 2 is all even, so DAPO's dynamic sampling drops it.
#: The two processes hold 19 and 21 tokens, so a loss normalised per process is visibly wrong.
LENGTHS = [2, 5, 6, 3, 1, 2, 6, 3, 2, 4, 2, 4]
#: Rows that stop with EOS (the rest are truncated at their length).
ENDS_WITH_EOS = {0, 3, 4, 7, 9, 10}


def even_length_reward(completion_ids: list[list[int]], **_: object) -> list[float]:
    """1 for an even number of generated tokens, else 0 (EOS counts as a token)."""
    return [1.0 if len(ids) % 2 == 0 else 0.0 for ids in completion_ids]


def fixed_rollout(prompts: list, trainer: RefimplGRPOTrainer) -> dict:
    """Completions that depend only on the global row index, so any split across processes
    sees the same ones. Token ids avoid the special tokens except a final EOS."""
    tok = trainer.processing_class
    special = {tok.pad_token_id, tok.bos_token_id, tok.eos_token_id}
    ordinary = [i for i in range(len(tok)) if i not in special]
    start = trainer.accelerator.process_index * len(prompts)
    prompt_ids, completion_ids = [], []
    for i, prompt in enumerate(prompts):
        row = start + i
        gen = torch.Generator().manual_seed(1000 + row)
        picks = torch.randint(0, len(ordinary), (LENGTHS[row],), generator=gen).tolist()
        ids = [ordinary[p] for p in picks]
        if row in ENDS_WITH_EOS:
            ids[-1] = tok.eos_token_id
        prompt_ids.append(tok(prompt)["input_ids"])
        completion_ids.append(ids)
    return {
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": [[0.0] * len(ids) for ids in completion_ids],
    }


class RecordingTrainer(RefimplGRPOTrainer):
    """Keeps the whole batch's advantages (gathered from every process) for the test."""

    recorded: dict = {}

    def _generate_and_score_completions(self, inputs):  # noqa: ANN001
        output = super()._generate_and_score_completions(inputs)
        acc = self.accelerator
        gather = lambda x: acc.gather(acc.pad_across_processes(x, dim=1, pad_index=0))  # noqa: E731
        self.recorded = {
            "advantages": gather(output["advantages"].float()),
            "loss_mask": gather(output["refimpl_loss_mask"].float()),
            "completion_ids": gather(output["completion_ids"]),
            "prompt_ids": gather(output["prompt_ids"]),
            "refimpl_count": float(output["refimpl_count"]),
        }
        return output


def run(name: str, out: Path, model_path: str, per_device: int, accumulation: int) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_path).float()
    problems = toy_envs.get_task("addition").sample(8, 0)
    dataset = Dataset.from_list([{"prompt": p.prompt} for p in problems])
    cfg = algorithms.get(name).Config()
    args = GRPOConfig(
        output_dir=str(out / f"trainer-{name}"),
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        num_generations=G,
        max_completion_length=MAX_NEW,
        max_steps=1,
        learning_rate=LR,
        optim="sgd",
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping: the step is −lr·gradient
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        bf16=False,
        temperature=1.0,
        shuffle_dataset=False,
    )
    trainer = RecordingTrainer(
        model=model,
        reward_funcs=even_length_reward,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout,
        algorithm=name,
        algorithm_config=dataclasses.replace(cfg),
    )
    trainer.train()
    if trainer.accelerator.is_main_process:
        weights = {
            k: v.detach().clone()
            for k, v in trainer.accelerator.unwrap_model(trainer.model).state_dict().items()
        }
        log = next(h for h in trainer.state.log_history if "loss" in h)
        torch.save(
            {
                **trainer.recorded,
                "weights": weights,
                "log": log,
                "num_processes": trainer.accelerator.num_processes,
                "distributed_type": str(trainer.accelerator.distributed_type),
                "backend": (
                    torch.distributed.get_backend() if torch.distributed.is_initialized() else None
                ),
            },
            out / f"{name}.pt",
        )
    trainer.accelerator.wait_for_everyone()


def main() -> None:
    """``OUT MODEL RUNS``: RUNS is ``;``-separated ``<per_device>x<accumulation>:<names>``."""
    out, model_path = Path(sys.argv[1]), sys.argv[2]
    for spec in sys.argv[3].split(";"):
        shape, names = spec.split(":")
        per_device, accumulation = (int(v) for v in shape.split("x"))
        folder = out / shape
        folder.mkdir(parents=True, exist_ok=True)
        for name in names.split(","):
            run(name, folder, model_path, per_device, accumulation)


if __name__ == "__main__":
    main()
